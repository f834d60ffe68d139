package shim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/shim/podnet"
	"github.com/sandlot-dev/sandlot/vm"
)

// Manifest labels the shim records in every snapshot of a pod's VM.
const (
	labelImageDigest = "sandlot.dev/image-digest"
	labelImageName   = "sandlot.dev/image-name"
	labelInitPID     = "sandlot.dev/init-pid"
)

// tapName is the VM's tap in the pod's network namespace (one per netns).
const tapName = "tap0"

// pod is one CRI pod sandbox: the network namespace its pause container
// holds and, from the app container's Create on, the VM.
type pod struct {
	id       string // CRI sandbox ID
	uid      string // the pod's UID: names its directory under <root>/pods
	netns    string
	hostname string

	host host // QEMU and the netns, through the service

	mu       sync.Mutex
	cfg      node.Config
	vm       machine
	net      podnet.Pod
	attached bool // the tap and filters are in place
	gateOpen bool // the guest's traffic may leave
	guard    netGuard
	identity identity.Identity
	labels   map[string]string
	vmSpec   vmSpec // what the VM was started with, for a restore in place
	// restoreRequest is the request ID of the VM's last restore in place.
	restoreRequest string
	control        *controlServer

	// The jail: the pause container's cgroupsPath and OOM score, the
	// cgroup directories made from it and the uid the pod's VMs run as.
	cgroupsPath string
	oomScoreAdj *int
	cgroups     []string
	vmUID       *uidClaim
}

// vmSpec is what the app container asks of the VM.
type vmSpec struct {
	BaseDisk string
	Restore  string // a snapshot directory, or "" to cold boot
	// Reboot boots on Restore's disk instead of restoring its memory.
	Reboot bool
	// StoreRoot is the store the restore's data is in (the agent says);
	// its manifest may name files only there and in the image cache.
	StoreRoot string
	// release lets the node agent free the staged data once the VM has
	// restored (nil when nothing was staged).
	release func()
	// Pool: a warm pool pod's VM stays paused after its restore until the
	// node agent pushes a claiming sandbox's identity and resumes it.
	Pool bool
	// Slot: a start slot runs no VM until a claim restores into it.
	Slot        bool
	VCPU        int
	MemoryMiB   int
	LayerMiB    int
	ImageDigest string
	ImageName   string
	Env         map[string]string
	// Network is the sandbox's rules (the pod's annotation), DNS its
	// resolv.conf: the guard enforces and serves them.
	Network *sandlotv1.SandboxNetwork
	DNS     dnsConfig
	// Volumes are the sandbox's volumes the guard's NFS server exports
	// and the guest mounts.
	Volumes []podVolume
	// EgressSecrets is the host directory of the header rules' Secret.
	EgressSecrets string
}

func (p *pod) dir() string { return p.cfg.Layout().PodDir(p.uid) }

// start takes over the pod's network and boots or restores the VM (a
// start slot's waits for a claim's restore). On failure nothing is left
// behind.
func (p *pod) start(ctx context.Context, s vmSpec, api controlapi.VMControlService) (err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.vm != nil {
		return errors.New("the pod's VM is running already: sandlot runs one app container per pod")
	}
	if err := os.MkdirAll(p.dir(), 0o700); err != nil {
		return fmt.Errorf("pod directory: %w", err)
	}
	defer func() {
		if err != nil {
			p.teardownLocked()
		}
	}()
	if err := p.attachNetwork(s); err != nil {
		return err
	}
	if err := p.prepareJail(); err != nil {
		return err
	}
	p.identity = p.newIdentity(s.Env, s.DNS)
	p.identity.Volumes, p.identity.VolumeServer = guestVolumes(s.Volumes)
	p.identity.EgressCA = string(p.guard.EgressCA())
	p.labels = map[string]string{labelImageDigest: s.ImageDigest, labelImageName: s.ImageName}
	p.vmSpec = s
	if s.Slot {
		p.host.vms.Warm(p.cfg)
		logf(ctx, "pod %s: start slot ready: no VM until a claim restores into it", p.uid)
	} else if err := p.launch(ctx, s); err != nil {
		return err
	}
	return p.serveControl(api)
}

// launch boots or restores the pod's first VM and opens its network; a
// warm pool's VM is paused once its guest settled.
func (p *pod) launch(ctx context.Context, s vmSpec) (err error) {
	cfg := p.vmConfig(s)
	trace := time.Now()
	switch {
	case s.Restore != "" && s.Reboot:
		p.vm, err = p.host.vms.Reboot(ctx, p.assets(), cfg, s.Restore, p.identity, restoreRoots(s.Restore, s.StoreRoot, p.cfg))
	case s.Restore != "":
		p.vm, err = p.host.vms.Restore(ctx, p.cfg.QEMU, cfg, s.Restore, p.identity, restoreRoots(s.Restore, s.StoreRoot, p.cfg))
	default:
		p.vm, err = p.host.vms.Boot(ctx, p.assets(), cfg, p.identity)
	}
	if err != nil {
		return err
	}
	if err := p.openNetwork(ctx); err != nil {
		return err
	}
	if err := p.mountVolumes(ctx, p.vm); err != nil {
		return err
	}
	how := "booted"
	if s.Restore != "" {
		how = "restored from " + s.Restore
	}
	logf(ctx, "pod %s: VM %s in %v", p.uid, how, time.Since(trace))
	if s.Pool {
		settle(ctx, p.vm, settleMax)
		if err := p.vm.Pause(ctx); err != nil {
			return fmt.Errorf("pause the warm pool VM: %w", err)
		}
	}
	return nil
}

func (p *pod) assets() vm.Assets {
	return vm.Assets{QEMU: p.cfg.QEMU, Kernel: p.cfg.Kernel, Initrd: p.cfg.Initrd, Modules: p.cfg.Modules}
}

func (p *pod) vmConfig(s vmSpec) vm.Config {
	return vm.Config{
		Name: "pod-" + p.uid, Accel: p.cfg.Accel, VCPU: s.VCPU, MemoryMiB: s.MemoryMiB,
		RunDir: p.cfg.Layout().VMDir(p.uid), MemoryDir: p.cfg.MemoryDir, DiskDir: p.cfg.PodDiskDir(p.uid),
		BaseDisk: s.BaseDisk, LayerMiB: s.LayerMiB, Jail: p.jail(),
		Net:     vm.NetSpec{MAC: p.net.MAC, Tap: tapName},
		StartIn: func(start func() error) error { return p.host.network.Run(p.netns, start) },
		Labels:  maps.Clone(p.labels),
	}
}

// attachNetwork reads the pod's interface and puts the tap in front of it,
// gate closed: nothing from the guest leaves before it took the pod's MAC.
func (p *pod) attachNetwork(s vmSpec) error {
	if p.netns == "" {
		return errors.New("the pod has no network namespace (host-network pods cannot run in a VM)")
	}
	n, err := p.host.network.Inspect(p.netns)
	if err != nil {
		return fmt.Errorf("inspect the pod's network: %w", err)
	}
	p.net = n
	if err := p.host.network.Attach(p.netns, n, tapName); err != nil {
		return fmt.Errorf("attach the VM to the pod's network: %w", err)
	}
	p.attached = true
	g, err := p.host.network.Guard(p.netns, n, guardSpec{Defaults: p.cfg.Network, DNS: s.DNS, Gateway: n.Gateway, Network: s.Network,
		Volumes: s.Volumes, Name: "pod " + p.uid, EgressSecrets: s.EgressSecrets})
	if err != nil {
		return fmt.Errorf("enforce the pod's traffic policy: %w", err)
	}
	p.guard = g
	return nil
}

// openNetwork opens the gate once the guest has the pod's identity and
// announces it.
func (p *pod) openNetwork(ctx context.Context) error {
	if err := p.host.network.OpenGate(p.netns, p.net, tapName); err != nil {
		return fmt.Errorf("open the pod's network to the VM: %w", err)
	}
	p.gateOpen = true
	return p.vm.Announce(ctx)
}

// newIdentity is the VM's identity from the pod. A pod without a token (a
// warm pool's, until a claim pushes the sandbox's; a plain pod of the
// runtime class) gets a random one nobody knows: the guest answers
// nothing until the token it may be reached with arrives.
func (p *pod) newIdentity(env map[string]string, dns dnsConfig) identity.Identity {
	token := env[sandlotv1.EnvAccessToken]
	if token == "" {
		token = rand.Text()
	}
	return identity.Identity{
		SandboxID:   env[sandlotv1.EnvSandboxID],
		AccessToken: token,
		Env:         maps.Clone(env),
		Hostname:    p.hostname,
		Network: &identity.Network{Interface: "eth0", Address: p.net.Address, Gateway: p.net.Gateway, MAC: p.net.MAC,
			DNS: guestDNS(dns)},
		UnixNano: time.Now().UnixNano(),
	}
}

// guest is the agent of the running VM, or an error.
func (p *pod) guest() (guest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.vm == nil {
		return nil, errors.New("the pod's VM is not running")
	}
	return p.vm.Guest(), nil
}

// qemuPID is the VM's host process, 0 without one.
func (p *pod) qemuPID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.vm == nil {
		return 0
	}
	return p.vm.PID()
}

// stop ends the VM and gives the pod's network back.
func (p *pod) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.teardownLocked()
}

func (p *pod) teardownLocked() error {
	var errs []error
	if p.control != nil {
		errs = append(errs, p.control.close())
		p.control = nil
	}
	if p.vm != nil {
		errs = append(errs, p.vm.Stop())
		p.vm = nil
	}
	if p.guard != nil {
		errs = append(errs, p.guard.Close())
		p.guard = nil
	}
	if p.attached {
		errs = append(errs, p.host.network.Detach(p.netns, p.net, tapName))
		p.attached, p.gateOpen = false, false
	}
	errs = append(errs, p.releaseJail())
	errs = append(errs, os.RemoveAll(p.dir()), os.RemoveAll(p.cfg.PodDiskDir(p.uid)))
	return errors.Join(errs...)
}

func (p *pod) label(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.labels[key]
}

// setLabel records a label in the pod's later snapshots.
func (p *pod) setLabel(key, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.labels[key] = value
	if p.vm != nil {
		p.vm.SetLabel(key, value)
	}
}

// replace stops the VM (a start slot has none) and restores the snapshot
// o names in its place, with the pod's network identity (and o's
// sandbox, when it names one); it returns the new guest's client.
func (p *pod) replace(ctx context.Context, o restoreOrder) (guest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.vm == nil && !p.vmSpec.Slot {
		return nil, errors.New("the pod's VM is not running")
	}
	if p.vm != nil {
		err := p.vm.Stop()
		p.vm = nil
		if err != nil {
			return nil, fmt.Errorf("stop the VM: %w", err)
		}
	}
	s := p.vmSpec
	s.Restore = o.dir
	id := o.withSandbox(p.identity)
	id.UnixNano = time.Now().UnixNano()
	v, err := p.host.vms.Restore(ctx, p.cfg.QEMU, p.vmConfig(s), o.dir, id, restoreRoots(o.dir, "", p.cfg))
	if err != nil {
		return nil, err
	}
	p.vm, p.identity, p.restoreRequest = v, id, o.requestID
	if !p.gateOpen { // a start slot's first VM: the guest has its identity now
		if err := p.openNetwork(ctx); err != nil {
			return nil, err
		}
	} else if err := v.Announce(ctx); err != nil {
		return nil, err
	}
	if err := p.mountVolumes(ctx, v); err != nil {
		return nil, err
	}
	return v.Guest(), nil
}

// empty: the pod is a start slot no claim has restored a VM into yet.
func (p *pod) empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.vm == nil && p.vmSpec.Slot
}

// applyNetwork puts the sandbox's rules in the pod's guard — before its
// VM runs, for a start slot's claim.
func (p *pod) applyNetwork(n *sandlotv1.SandboxNetwork, ingress []netip.Prefix) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.guard == nil {
		return fmt.Errorf("%w: the pod's network is not attached", errdefs.ErrFailedPrecondition)
	}
	if err := p.guard.Apply(n, ingress); err != nil {
		return fmt.Errorf("set network: %w", err)
	}
	return nil
}

// restoredBy is the request ID of the VM's last restore in place.
func (p *pod) restoredBy() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restoreRequest
}

// paused reports whether the VM's vCPUs are stopped.
func (p *pod) paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.vm != nil && p.vm.State() == vm.Paused
}

func (p *pod) pause(ctx context.Context) error {
	return p.withVM(func(v machine) error { return v.Pause(ctx) })
}

func (p *pod) resume(ctx context.Context) error {
	return p.withVM(func(v machine) error { return v.Resume(ctx) })
}

func (p *pod) withVM(fn func(machine) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.vm == nil {
		return errors.New("the pod's VM is not running")
	}
	return fn(p.vm)
}
