package shim

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/shim/podnet"
	"github.com/sandlot-dev/sandlot/vm"
)

// fakeHypervisor boots fakeMachines: in memory, no QEMU.
type fakeHypervisor struct {
	mu                             sync.Mutex
	machines                       []*fakeMachine
	bootErr, restoreErr, compatErr error
}

func (h *fakeHypervisor) Boot(_ context.Context, _ vm.Assets, cfg vm.Config, id identity.Identity) (machine, error) {
	return h.start(cfg, "", id, h.bootErr)
}

func (h *fakeHypervisor) Restore(_ context.Context, _ string, cfg vm.Config, dir string, id identity.Identity, _ vm.Roots) (machine, error) {
	return h.start(cfg, dir, id, h.restoreErr)
}

func (h *fakeHypervisor) Reboot(_ context.Context, _ vm.Assets, cfg vm.Config, dir string, id identity.Identity, _ vm.Roots) (machine, error) {
	m, err := h.start(cfg, dir, id, h.restoreErr)
	if m != nil {
		m.(*fakeMachine).rebooted = true
	}
	return m, err
}

func (h *fakeHypervisor) start(cfg vm.Config, dir string, id identity.Identity, fail error) (machine, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	// Like QEMU, it starts in the pod's netns.
	if err := cfg.StartIn(func() error { return nil }); err != nil {
		return nil, err
	}
	// PIDs no process has: the cleanup record must not name a real one.
	m := &fakeMachine{pid: 1<<30 + len(h.machines), state: vm.Running, cfg: cfg, restoredFrom: dir,
		identity: id, labels: maps.Clone(cfg.Labels), guest: newFakeGuest()}
	h.machines = append(h.machines, m)
	return m, nil
}

// last is the machine started last.
func (h *fakeHypervisor) last() *fakeMachine {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.machines) == 0 {
		return nil
	}
	return h.machines[len(h.machines)-1]
}

func (h *fakeHypervisor) Compatible(*snapshot.Manifest, node.Config) error { return h.compatErr }
func (h *fakeHypervisor) Warm(node.Config)                                 {}

// fakeMachine is a VM in memory; its guest is a fakeGuest.
type fakeMachine struct {
	pid          int
	cfg          vm.Config
	restoredFrom string
	rebooted     bool
	guest        *fakeGuest

	mu        sync.Mutex
	state     vm.State
	identity  identity.Identity
	labels    map[string]string
	announced int
}

func (m *fakeMachine) PID() int             { return m.pid }
func (m *fakeMachine) Accel() string        { return "tcg" }
func (m *fakeMachine) GuestAgent() string   { return "0.0.0-fake" }
func (m *fakeMachine) OwnedPaths() []string { return nil }
func (m *fakeMachine) Guest() guest         { return m.guest }

func (m *fakeMachine) State() vm.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

func (m *fakeMachine) SetLabel(key, value string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.labels[key] = value
}

func (m *fakeMachine) label(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.labels[key]
}

func (m *fakeMachine) Announce(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.announced++
	return nil
}

func (m *fakeMachine) Pause(context.Context) error  { return m.move(vm.Running, vm.Paused) }
func (m *fakeMachine) Resume(context.Context) error { return m.move(vm.Paused, vm.Running) }

func (m *fakeMachine) move(from, to vm.State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != from {
		return &vm.ErrTransition{From: m.state, To: to}
	}
	m.state = to
	return nil
}

func (m *fakeMachine) Snapshot(context.Context, string) (*snapshot.Manifest, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &snapshot.Manifest{Version: snapshot.ManifestVersion, Labels: maps.Clone(m.labels), PausedNanos: 1}, nil
}

func (m *fakeMachine) SetIdentity(_ context.Context, id identity.Identity) (control.SetIdentityResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.identity = id
	return control.SetIdentityResult{Stored: true}, nil
}

func (m *fakeMachine) Stats() (vm.Stats, error) {
	return vm.Stats{PSSBytes: 64 << 20, PrivateBytes: 32 << 20, CPU: 1e9}, nil
}

// Stop ends the VM: every guest process's events end without an exit.
func (m *fakeMachine) Stop() error {
	m.mu.Lock()
	m.state = vm.Stopped
	m.mu.Unlock()
	m.guest.gone()
	return nil
}

func (m *fakeMachine) stopped() bool { return m.State() == vm.Stopped }

// fakeGuest is a guest agent in memory. A signal ends a process as its
// default action would (exit 128+signal).
type fakeGuest struct {
	mu          sync.Mutex
	nextPID     int
	procs       map[int]chan control.Event
	started     []control.StartParams
	signals     [][2]int // pid, signal
	stdin       map[int][]byte
	stdinClosed map[int]bool
	stdinDelay  time.Duration // each WriteStdin takes this long (a slow link)
	resized     map[int][2]uint16
	startErr    error
	signalErr   error
}

func newFakeGuest() *fakeGuest {
	return &fakeGuest{nextPID: 100, procs: map[int]chan control.Event{}, stdin: map[int][]byte{},
		stdinClosed: map[int]bool{}, resized: map[int][2]uint16{}}
}

func (g *fakeGuest) Start(_ context.Context, p control.StartParams) (guestProcess, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.startErr != nil {
		return guestProcess{}, g.startErr
	}
	g.started = append(g.started, p)
	g.nextPID++
	return g.followLocked(g.nextPID), nil
}

func (g *fakeGuest) MountVolumes(context.Context) error { return nil }

func (g *fakeGuest) Follow(pid int) guestProcess {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.followLocked(pid)
}

func (g *fakeGuest) followLocked(pid int) guestProcess {
	ch := make(chan control.Event, 64)
	g.procs[pid] = ch
	return guestProcess{PID: pid, Events: ch, Close: func() {}}
}

func (g *fakeGuest) SignalGroup(_ context.Context, pid, sig int) error {
	g.mu.Lock()
	g.signals = append(g.signals, [2]int{pid, sig})
	_, ok := g.procs[pid]
	err := g.signalErr
	g.mu.Unlock()
	switch {
	case err != nil:
		return err
	case !ok:
		return &control.Error{Code: control.CodeNotFound}
	}
	g.exit(pid, 128+sig)
	return nil
}

// WriteStdin refuses a write after CloseStdin, as the guest does.
func (g *fakeGuest) WriteStdin(_ context.Context, pid int, data []byte) error {
	g.mu.Lock()
	delay := g.stdinDelay
	g.mu.Unlock()
	time.Sleep(delay) // the link's latency, not a synchronisation
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stdinClosed[pid] {
		return &control.Error{Code: control.CodeNotFound, Message: "stdin closed"}
	}
	g.stdin[pid] = append(g.stdin[pid], data...)
	return nil
}

func (g *fakeGuest) CloseStdin(_ context.Context, pid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stdinClosed[pid] = true
	return nil
}

func (g *fakeGuest) Resize(_ context.Context, pid int, cols, rows uint16) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.procs[pid]; !ok {
		return &control.Error{Code: control.CodeNotFound}
	}
	g.resized[pid] = [2]uint16{cols, rows}
	return nil
}

// output pushes an output event of a running process.
func (g *fakeGuest) output(pid int, stream, data string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch, ok := g.procs[pid]; ok {
		ch <- control.Event{Name: control.EventOutput, PID: pid, Stream: stream, Data: []byte(data)}
	}
}

// exit ends a process with status, as the guest reports it.
func (g *fakeGuest) exit(pid, status int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch, ok := g.procs[pid]; ok {
		ch <- control.Event{Name: control.EventExit, PID: pid, Exit: &control.ExitStatus{PID: pid, Status: status}}
		close(ch)
		delete(g.procs, pid)
	}
}

// gone ends every process's events without an exit: the VM went away.
func (g *fakeGuest) gone() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pid, ch := range g.procs {
		close(ch)
		delete(g.procs, pid)
	}
}

func (g *fakeGuest) snapshot() (started []control.StartParams, signals [][2]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]control.StartParams(nil), g.started...), append([][2]int(nil), g.signals...)
}

// fakeNetwork stands for podnet: it records the tap's life.
type fakeNetwork struct {
	mu                        sync.Mutex
	inspectErr                error
	attached, gateOpen        bool
	attaches, detaches, opens int
	rules                     []*sandlotv1.SandboxNetwork // each Guard and Apply
}

var fakePodNet = podnet.Pod{Interface: "eth0", Address: "10.88.0.5/16", Gateway: "10.88.0.1", MAC: "02:42:0a:58:00:05", MTU: 1500}

func (n *fakeNetwork) Inspect(string) (podnet.Pod, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fakePodNet, n.inspectErr
}

func (n *fakeNetwork) Attach(string, podnet.Pod, string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attached {
		return errors.New("tap exists")
	}
	n.attached, n.attaches = true, n.attaches+1
	return nil
}

func (n *fakeNetwork) OpenGate(string, podnet.Pod, string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gateOpen, n.opens = true, n.opens+1
	return nil
}

func (n *fakeNetwork) Detach(string, podnet.Pod, string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.attached, n.gateOpen, n.detaches = false, false, n.detaches+1
	return nil
}

func (n *fakeNetwork) Run(_ string, fn func() error) error { return fn() }

// Guard records the rules it was given (the real one is tested in
// shim/podnet and on the cluster).
func (n *fakeNetwork) Guard(_ string, _ podnet.Pod, g guardSpec) (netGuard, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rules = append(n.rules, g.Network)
	return fakeGuard{n}, nil
}

type fakeGuard struct{ n *fakeNetwork }

func (g fakeGuard) Apply(r *sandlotv1.SandboxNetwork, _ []netip.Prefix) error {
	g.n.mu.Lock()
	defer g.n.mu.Unlock()
	g.n.rules = append(g.n.rules, r)
	return nil
}

func (fakeGuard) Close() error     { return nil }
func (fakeGuard) EgressCA() []byte { return nil }

func (n *fakeNetwork) state() (attached bool, attaches, detaches int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attached, n.attaches, n.detaches
}
