package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/vm/qmp"
)

// Assets are the files a cold boot needs.
type Assets struct {
	QEMU    string // default qemu-system-x86_64 in PATH
	Kernel  string // PVH vmlinux
	Initrd  string // initramfs with sandlot-guest as /init
	Modules string // the SANDLOT_MODULES boot parameter: .ko paths in the initramfs
}

// Config is one VM's shape and where its files go.
type Config struct {
	Name      string
	Accel     string // "" picks one (DetectAccel)
	VCPU      int
	MemoryMiB int
	// RunDir holds the VM's sockets, serial console log and writable
	// layer; it is removed by Stop.
	RunDir string
	// MemoryDir is a tmpfs directory for the guest RAM file of a booted
	// VM (default /dev/shm).
	MemoryDir string
	// DiskDir holds the writable layer and the console log: a directory
	// on a disk, not node RAM (default RunDir). Removed by Stop.
	DiskDir string
	// Jail, when set, confines QEMU (see Jail); nil runs it as the caller.
	Jail     *Jail
	BaseDisk string
	// LayerMiB sizes a cold-booted VM's writable layer (default 1024).
	LayerMiB int
	Net      NetSpec
	// StartIn, when set, wraps the start of the QEMU process: the shim
	// uses it to start QEMU inside the pod's network namespace.
	StartIn func(start func() error) error
	// Labels are recorded in the manifest of every snapshot of the VM
	// (the shim records the image digest and the init process there).
	Labels map[string]string
}

// VM is one QEMU microvm and the channels to it.
type VM struct {
	cfg  Config
	spec Spec
	QEMU string

	mu    sync.Mutex
	state State
	// ops serialises Pause, Resume and Snapshot (each stops or continues
	// the vCPUs); Stop does not wait for it: it kills QEMU, and a running
	// operation then fails.
	ops sync.Mutex

	cmd    *exec.Cmd
	exited chan struct{}
	qmp    *qmp.Monitor
	ctl    *control.Client

	// base is the memory file a restored VM maps copy-on-write (nil for a
	// booted VM, whose RAM file is its own).
	base *snapshot.Manifest
	// ramID is a restored VM's base memory file as /proc/<pid>/maps names
	// it (device and inode): found even if the file is unlinked later.
	ramID string
	// identity is pushed to the guest once it runs.
	identity identity.Identity
	// guestAgent is the version the guest agent gave at its last identity
	// ("" until then, or from a guest older than the field).
	guestAgent string
}

// GuestAgent is the guest agent's version, as it last said.
func (v *VM) GuestAgent() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.guestAgent
}

// State is the VM's current state.
func (v *VM) State() State {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state
}

func (v *VM) move(to State) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, err := next(v.state, to)
	v.state = s
	return err
}

// PID is QEMU's process ID.
func (v *VM) PID() int { return v.cmd.Process.Pid }

// Control is the guest control channel.
func (v *VM) Control() *control.Client { return v.ctl }

// SetLabel records a label for the manifests of later snapshots.
func (v *VM) SetLabel(key, value string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cfg.Labels == nil {
		v.cfg.Labels = map[string]string{}
	}
	v.cfg.Labels[key] = value
}

// OwnedPaths are the files and directories the VM made and Stop removes:
// its run directory and a booted VM's RAM (a restored VM maps a snapshot's,
// which it does not own). os.RemoveAll removes beneath each by fd
// (openat with O_NOFOLLOW, unlinkat): a link QEMU planted there is
// removed, never followed.
func (v *VM) OwnedPaths() []string {
	paths := []string{v.cfg.RunDir, v.diskDir(), v.jailRoot(), v.stageDir()}
	if v.spec.SharedMemory {
		paths = append(paths, filepath.Dir(v.spec.MemoryPath))
	}
	return paths
}

// Accel is the accelerator the VM runs on (kvm or tcg).
func (v *VM) Accel() string { return v.spec.Accel }

// Exited is closed when QEMU has exited, for whatever reason.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// RAMFile is the file backing guest RAM (a booted VM's own; a restored
// VM's is its snapshot's, mapped copy-on-write).
func (v *VM) RAMFile() string { return v.spec.MemoryPath }

func (c *Config) defaults() error {
	if c.Accel == "" {
		a, err := DetectAccel()
		if err != nil {
			return err
		}
		c.Accel = a
	}
	if c.VCPU == 0 {
		c.VCPU = 1
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = 256
	}
	if c.MemoryDir == "" {
		c.MemoryDir = "/dev/shm"
	}
	if c.LayerMiB == 0 {
		c.LayerMiB = 1024
	}
	if c.RunDir == "" || c.Name == "" {
		return errors.New("vm config: name and run dir are required")
	}
	if err := os.MkdirAll(c.RunDir, 0o700); err != nil {
		return err
	}
	if c.DiskDir != "" {
		return os.MkdirAll(c.DiskDir, 0o700)
	}
	return nil
}

// baseSpec is the part of the command line a boot and a restore share
// (device sets must match between a snapshot and its restores). QEMU runs
// under its seccomp sandbox: sandlot only migrates over fds and saves
// device state to files, so QEMU never needs to spawn.
func (c Config) baseSpec() Spec {
	disk := c.DiskDir
	if disk == "" {
		disk = c.RunDir
	}
	s := Spec{Name: c.Name, Accel: c.Accel, VCPU: c.VCPU, MemoryMiB: c.MemoryMiB, BaseDisk: c.BaseDisk,
		Layer: filepath.Join(disk, "layer.raw"), QMPSocket: filepath.Join(c.RunDir, "qmp.sock"),
		ControlSocket: filepath.Join(c.RunDir, "control.sock"), Net: c.Net,
		Console: filepath.Join(disk, "console.log"), Sandbox: true}
	if c.Net.Tap != "" {
		s.TapFD = tapFD
	}
	return s
}

// diskDir is where the VM's writable layer and console log live.
func (v *VM) diskDir() string { return filepath.Dir(v.spec.Layer) }

// launch starts QEMU for spec and connects QMP.
func (v *VM) launch(ctx context.Context) error {
	args, err := v.spec.Args()
	if err != nil {
		return err
	}
	if v.QEMU == "" {
		v.QEMU = "qemu-system-x86_64"
	}
	if v.cmd, err = v.command(args); err != nil {
		return err
	}
	// QEMU's stderr is a pipe exec copies into the capped log (a file
	// handed to QEMU could grow without bound).
	qlog, err := openLogWriter(qemuLogPath(v.cfg.RunDir), QEMULogMax)
	if err != nil {
		return fmt.Errorf("qemu log: %w", err)
	}
	v.cmd.Stderr, v.cmd.WaitDelay = qlog, qemuStderrDrain
	console, err := v.startConsole()
	if err != nil {
		_ = qlog.Close()
		return err
	}
	defer console.Close() // QEMU holds its own copy
	v.cmd.Stdout = console
	start := func() error { return v.startQEMU() }
	if v.cfg.StartIn != nil {
		start = func() error { return v.cfg.StartIn(v.startQEMU) }
	}
	if err := start(); err != nil {
		_ = qlog.Close()
		return fmt.Errorf("start %s: %w", v.QEMU, err)
	}
	v.exited = make(chan struct{})
	// Wait returns once the stderr copy has ended too: the log is whole
	// when the exit is reported, and the copy leaves no goroutine behind.
	go func() { _ = v.cmd.Wait(); _ = qlog.Close(); close(v.exited) }()
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-v.exited:
			cancel() // QEMU died: stop waiting for its socket
		case <-qctx.Done():
		}
	}()
	m, err := v.dialQMP(qctx)
	if err != nil {
		return fmt.Errorf("qemu %s: %w%s", v.cfg.Name, err, v.qemuLog())
	}
	v.qmp = m
	return nil
}

// dialQMP connects to QEMU's QMP socket, in the run directory QEMU can
// write: through the socket opened beneath it, never a symlink there.
func (v *VM) dialQMP(ctx context.Context) (*qmp.Monitor, error) {
	conn, err := dialSocket(ctx, v.spec.QMPSocket)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	return qmp.Connect(ctx, conn)
}

// startQEMU starts the process, opening the tap first (in the caller's
// network namespace: StartIn's) so that QEMU gets it as an fd and needs
// no CAP_NET_ADMIN.
func (v *VM) startQEMU() error {
	if v.spec.TapFD == 0 {
		return v.cmd.Start()
	}
	tap, err := openTap(v.spec.Net.Tap)
	if err != nil {
		return err
	}
	defer tap.Close()
	v.cmd.ExtraFiles = []*os.File{tap} // fd 3: tapFD
	return v.cmd.Start()
}

// qemuLog returns QEMU's own words, for errors.
func (v *VM) qemuLog() string {
	b := logTail(qemuLogPath(v.cfg.RunDir), qemuLogTail)
	if len(b) == 0 {
		return ""
	}
	return ": qemu says: " + string(b)
}

// connect dials the guest control channel, waits for the agent and
// pushes the identity (with a fresh RNG seed).
func (v *VM) connect(ctx context.Context, id identity.Identity) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-v.exited:
			cancel() // the guest powered off (or QEMU died): stop waiting
		case <-ctx.Done():
		}
	}()
	trace := newTrace("connect " + v.cfg.Name)
	defer trace.done()
	if err := v.dialControl(ctx); err != nil {
		return err
	}
	c := v.ctl
	trace.step("dialled")
	// A booting guest opens its port late, so it is pinged until it
	// answers; a restored guest's port is open already (its state came
	// with the snapshot): the identity goes out at once.
	if v.base == nil {
		if _, err := c.WaitReady(ctx, 100*time.Millisecond); err != nil {
			return v.guestErr(fmt.Errorf("guest agent: %w", err))
		}
		trace.step("agent answered")
	}
	res, err := v.setIdentity(ctx, c, id)
	trace.step(fmt.Sprintf("identity set (guest steps %v)", res.StepNanos))
	if err != nil {
		return fmt.Errorf("set identity of %s: %w", v.cfg.Name, err)
	}
	return res.Err()
}

// dialControl connects the host end of the control channel (once). A
// restore dials it before the device state is loaded: the snapshot says
// the host was connected, and a port whose host is not connected when
// the state loads gets a "host closed" event, on which the guest reopens
// its end — and drops what the host writes meanwhile (the identity; the
// start then waited for its reply until the CRI's timeout).
func (v *VM) dialControl(ctx context.Context) error {
	if v.ctl != nil {
		return nil
	}
	// The socket is in the run directory QEMU can write: dialled beneath
	// it (dialSocket), never through a symlink planted there.
	conn, err := dialSocket(ctx, v.spec.ControlSocket)
	if err != nil {
		return v.guestErr(fmt.Errorf("control channel: %w", err))
	}
	v.ctl = control.NewClient(conn)
	return nil
}

// SetIdentity pushes a new identity to the running guest (a warm pool
// claim: the sandbox's ID, env and token), with a fresh seed for its RNG.
func (v *VM) SetIdentity(ctx context.Context, id identity.Identity) (control.SetIdentityResult, error) {
	c := v.Control()
	if c == nil {
		return control.SetIdentityResult{}, fmt.Errorf("set identity of %s: no control channel", v.cfg.Name)
	}
	return v.setIdentity(ctx, c, id)
}

// setIdentity sends id with 64 bytes of the host's RNG: every clone of a
// snapshot gets its own, and the guest feeds them to its kernel as is.
// The guest's answer says its agent's version.
func (v *VM) setIdentity(ctx context.Context, c *control.Client, id identity.Identity) (control.SetIdentityResult, error) {
	seed := make([]byte, 64)
	if _, err := randRead(seed); err != nil {
		return control.SetIdentityResult{}, err
	}
	res, err := c.SetIdentity(ctx, id, seed)
	if err == nil {
		v.mu.Lock()
		v.guestAgent = guestAgentVersion(res.Agent)
		v.mu.Unlock()
	}
	return res, err
}

// guestVersionRE is what the host takes from a guest as its agent's
// version. The guest is not trusted (root in it can answer for its
// agent, up to a 16 MiB frame): anything else — long, control
// characters, spaces — is dropped, never written into the Sandbox's
// status by the node agent.
var guestVersionRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$`)

func guestAgentVersion(s string) string {
	if guestVersionRE.MatchString(s) {
		return s
	}
	return ""
}

// guestErr adds why the guest went away: QEMU's exit and the end of the
// serial console (where the guest's /init says what failed).
func (v *VM) guestErr(err error) error {
	v.awaitExit(err)
	select {
	case <-v.exited:
	default:
		return err
	}
	msg := fmt.Sprintf("%v; qemu exited (%v)%s", err, v.cmd.ProcessState, v.qemuLog())
	if b := consoleTail(v.spec.Console); len(b) > 0 {
		if len(b) > 1500 {
			b = b[len(b)-1500:]
		}
		msg += "; guest console: " + string(b)
	}
	return errors.New(msg)
}

// awaitExit gives QEMU's exit a moment to land when a channel to it just
// closed, so errors can carry QEMU's (and the guest's) last words.
func (v *VM) awaitExit(err error) {
	if errors.Is(err, qmp.ErrClosed) || errors.Is(err, control.ErrClosed) {
		select {
		case <-v.exited:
		case <-time.After(2 * time.Second):
		}
	}
}

// Pause stops the vCPUs.
func (v *VM) Pause(ctx context.Context) error {
	v.syncGuest(ctx)
	return v.transition(Paused, func() error { return v.qmpErr(v.qmp.Stop(ctx), "pause") })
}

// Resume continues the vCPUs.
func (v *VM) Resume(ctx context.Context) error {
	return v.transition(Running, func() error { return v.qmpErr(v.qmp.Cont(ctx), "resume") })
}

// transition checks the move is legal, does it, and only then records
// the new state.
func (v *VM) transition(to State, do func() error) error {
	v.ops.Lock()
	defer v.ops.Unlock()
	if _, err := next(v.State(), to); err != nil {
		return err
	}
	if err := do(); err != nil {
		return err
	}
	return v.move(to)
}

// qmpErr names the VM and adds QEMU's log when QEMU is gone.
func (v *VM) qmpErr(err error, op string) error {
	if err == nil {
		return nil
	}
	v.awaitExit(err)
	select {
	case <-v.exited:
		return fmt.Errorf("%s %s: qemu exited (%v): %w%s", op, v.cfg.Name, v.cmd.ProcessState, err, v.qemuLog())
	default:
		return fmt.Errorf("%s %s: %w", op, v.cfg.Name, err)
	}
}

// Stop ends QEMU and removes everything the VM made: its sockets, RAM
// file and run directory. Safe to call more than once.
func (v *VM) Stop() error {
	v.mu.Lock()
	v.state = Stopped
	v.mu.Unlock()
	if v.ctl != nil {
		v.ctl.Close()
	}
	if v.qmp != nil {
		v.qmp.Close()
	}
	if v.cmd != nil && v.cmd.Process != nil {
		_ = v.cmd.Process.Kill()
		<-v.exited
	}
	var errs []error
	for _, p := range v.OwnedPaths() {
		errs = append(errs, os.RemoveAll(p))
	}
	return errors.Join(errs...)
}

// Announce makes QEMU send RARPs from the NIC's MAC and asks the guest to
// announce its addresses (VIRTIO_NET_F_GUEST_ANNOUNCE): after a restored
// VM took a new network identity, switches and neighbours learn it.
func (v *VM) Announce(ctx context.Context) error {
	args := map[string]any{"initial": 50, "max": 550, "rounds": 2, "step": 50}
	return v.qmpErr(v.qmp.Execute(ctx, "announce-self", args, nil), "announce")
}
