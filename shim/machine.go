package shim

import (
	"context"
	"fmt"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/shim/podnet"
	"github.com/sandlot-dev/sandlot/vm"
)

// host is what the task service uses outside the shim process: QEMU, the
// pod's network namespace and containerd's image store. NewTaskService
// gives the real ones; unit tests give fakes, so the task API runs
// without root, KVM or containerd.
type host struct {
	vms     hypervisor
	network hostNetwork
	// digest is the digest of the named image in the request's namespace.
	digest func(ctx context.Context, image string) (string, error)
	// self is the shim's own process: its cgroup, its OOM score.
	self shimSelf
}

// realHost reaches the node: QEMU through vm/, the netns through podnet,
// images through containerd's gRPC API at address.
func realHost(address string) host {
	return host{vms: qemu{}, network: podnetNetwork{}, self: processSelf{},
		digest: func(ctx context.Context, image string) (string, error) {
			return imageDigest(ctx, address, namespace(ctx), image)
		}}
}

// hypervisor starts VMs and says whether this node can restore a snapshot.
type hypervisor interface {
	Boot(ctx context.Context, a vm.Assets, cfg vm.Config, id identity.Identity) (machine, error)
	Restore(ctx context.Context, qemu string, cfg vm.Config, dir string, id identity.Identity, roots vm.Roots) (machine, error)
	// Reboot cold-boots on the disk of the snapshot in dir (its memory
	// unread).
	Reboot(ctx context.Context, a vm.Assets, cfg vm.Config, dir string, id identity.Identity, roots vm.Roots) (machine, error)
	Compatible(m *snapshot.Manifest, cfg node.Config) error
	// Warm readies what a first restore reads of the node (a start
	// slot's, before its claim): QEMU's version.
	Warm(cfg node.Config)
}

// machine is what the shim asks of a running VM (a *vm.VM in production).
type machine interface {
	PID() int
	State() vm.State
	Accel() string
	// GuestAgent is the guest agent's version as it last said ("": not
	// yet, or a guest older than that).
	GuestAgent() string
	OwnedPaths() []string
	SetLabel(key, value string)
	Guest() guest
	Announce(ctx context.Context) error
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	Snapshot(ctx context.Context, dir string) (*snapshot.Manifest, error)
	SetIdentity(ctx context.Context, id identity.Identity) (control.SetIdentityResult, error)
	Stats() (vm.Stats, error)
	Stop() error
}

// guest is what the shim asks of the agent in a VM (a *control.Client).
type guest interface {
	Start(ctx context.Context, p control.StartParams) (guestProcess, error)
	// Follow subscribes to the events of a process already running (a
	// restored VM's app process).
	Follow(pid int) guestProcess
	SignalGroup(ctx context.Context, pid, sig int) error
	WriteStdin(ctx context.Context, pid int, data []byte) error
	CloseStdin(ctx context.Context, pid int) error
	Resize(ctx context.Context, pid int, cols, rows uint16) error
	// MountVolumes has the guest mount its identity's volumes (their
	// server is reached through the network, open by then).
	MountVolumes(ctx context.Context) error
}

// guestProcess is a guest process the shim follows: its events, in
// order, end after its exit or when the VM goes; Close unsubscribes.
type guestProcess struct {
	PID    int
	Events <-chan control.Event
	Close  func()
}

// hostNetwork puts a VM in front of a pod's interface (podnet).
type hostNetwork interface {
	Inspect(netns string) (podnet.Pod, error)
	Attach(netns string, n podnet.Pod, tap string) error
	OpenGate(netns string, n podnet.Pod, tap string) error
	Detach(netns string, n podnet.Pod, tap string) error
	// Guard enforces the traffic policy on an attached pod.
	Guard(netns string, n podnet.Pod, g guardSpec) (netGuard, error)
	// Run runs fn in the netns (QEMU starts there to open the tap).
	Run(netns string, fn func() error) error
}

// qemu is the real hypervisor.
type qemu struct{}

// Boot, Restore and Snapshot write the VM's files (a restore copies its
// disk layer, a snapshot its RAM), charged to the shim: its cap is off.
func (qemu) Boot(ctx context.Context, a vm.Assets, cfg vm.Config, id identity.Identity) (machine, error) {
	defer uncapped()()
	return asMachine(vm.Boot(ctx, a, cfg, id))
}

func (qemu) Restore(ctx context.Context, qemuPath string, cfg vm.Config, dir string, id identity.Identity, roots vm.Roots) (machine, error) {
	defer uncapped()()
	return asMachine(vm.Restore(ctx, qemuPath, cfg, dir, id, roots))
}

func (qemu) Reboot(ctx context.Context, a vm.Assets, cfg vm.Config, dir string, id identity.Identity, roots vm.Roots) (machine, error) {
	defer uncapped()()
	return asMachine(vm.Reboot(ctx, a, cfg, dir, id, roots))
}

// asMachine keeps a VM returned with an error (the pod stops it) and
// turns no VM into a nil machine, not a machine holding a nil *vm.VM.
func asMachine(v *vm.VM, err error) (machine, error) {
	if v == nil {
		return nil, err
	}
	return vmMachine{v}, err
}

// Warm runs QEMU once for its version (cached per process), off the path
// of the claim that restores into a start slot; an error shows then.
func (qemu) Warm(cfg node.Config) { _, _ = vm.QEMUVersion(cfg.QEMU) }

// Compatible checks this node's QEMU, accel and CPU can restore m.
func (qemu) Compatible(m *snapshot.Manifest, cfg node.Config) error {
	accel := cfg.Accel
	if accel == "" {
		var err error
		if accel, err = vm.DetectAccel(); err != nil {
			return fmt.Errorf("detect accel: %w", err)
		}
	}
	qv, err := vm.QEMUVersion(cfg.QEMU)
	if err != nil {
		return fmt.Errorf("QEMU version: %w", err)
	}
	return m.Compatible(accel, qv, vm.CPUFingerprint())
}

// vmMachine is a *vm.VM whose guest client is seen through guest.
type vmMachine struct{ *vm.VM }

func (m vmMachine) Guest() guest { return controlGuest{m.Control()} }

func (m vmMachine) Snapshot(ctx context.Context, dir string) (*snapshot.Manifest, error) {
	defer uncapped()()
	return m.VM.Snapshot(ctx, dir)
}

// controlGuest is a *control.Client seen through guest.
type controlGuest struct{ *control.Client }

func (g controlGuest) Start(ctx context.Context, p control.StartParams) (guestProcess, error) {
	proc, err := g.Client.Start(ctx, p)
	if err != nil {
		return guestProcess{}, err
	}
	return guestProcess{PID: proc.PID, Events: proc.Events(), Close: proc.Close}, nil
}

func (g controlGuest) MountVolumes(ctx context.Context) error {
	_, err := g.Client.MountVolumes(ctx)
	return err
}

func (g controlGuest) Follow(pid int) guestProcess {
	sub := g.Subscribe(pid)
	return guestProcess{PID: pid, Events: sub.C, Close: sub.Close}
}

// podnetNetwork is the real hostNetwork.
type podnetNetwork struct{}

func (podnetNetwork) Inspect(netns string) (podnet.Pod, error) { return podnet.Inspect(netns, "") }

func (podnetNetwork) Attach(netns string, n podnet.Pod, tap string) error {
	return podnet.Attach(netns, n, tap, podnet.WithResolver(resolverAddr))
}

func (podnetNetwork) OpenGate(netns string, n podnet.Pod, tap string) error {
	return podnet.OpenGate(netns, n, tap, podnet.WithResolver(resolverAddr))
}

func (podnetNetwork) Guard(netns string, _ podnet.Pod, g guardSpec) (netGuard, error) {
	return startGuard(netns, g)
}

func (podnetNetwork) Detach(netns string, n podnet.Pod, tap string) error {
	return podnet.Detach(netns, n, tap)
}

func (podnetNetwork) Run(netns string, fn func() error) error { return podnet.Run(netns, fn) }
