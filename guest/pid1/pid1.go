// Package pid1 does what /init must in a sandlot VM: mount the kernel
// filesystems, load the virtio modules, assemble the root (read-only base
// disk + writable layer, overlaid) and switch into it, reap orphans, and
// shut down cleanly (terminate everything, sync, unmount, power off).
//
// The boot sequence is computed by Plan, a pure function of Config (and
// tested as such); the executor that applies it is a thin layer over
// syscalls. The Reaper is usable (and tested) outside PID 1.
package pid1

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Config is what /init needs to know.
type Config struct {
	// Modules are .ko files (absolute paths in the initramfs) loaded in
	// order with finit_module; already loaded ones are fine.
	Modules []string
	// BaseDevice is the read-only base disk (e.g. /dev/vda). Empty: stay
	// in the initramfs (no root switch).
	BaseDevice string
	// BaseFSType defaults to ext4.
	BaseFSType string
	// WritableDevice is the writable layer (e.g. /dev/vdb), formatted by
	// the host. Empty: writes go to a tmpfs (lost at power-off).
	WritableDevice string
	// WritableFSType defaults to ext4.
	WritableFSType string
	// NewRoot is where the overlay is assembled. Default /newroot.
	NewRoot string
	// Cgroup mounts cgroup2 at /sys/fs/cgroup.
	Cgroup bool
	// DiskTmp keeps the image's /tmp instead of mounting a tmpfs there.
	DiskTmp bool
	// DeviceTimeout bounds the wait for a block device after the modules
	// load. Default 10s.
	DeviceTimeout time.Duration
	// ShutdownTimeout is how long processes get between SIGTERM and
	// SIGKILL. Default 5s.
	ShutdownTimeout time.Duration
	// Main runs once the root is ready (the guest agent's services). Its
	// ctx is canceled when shutdown starts. When Main returns, the VM
	// shuts down.
	Main func(ctx context.Context, in *Init) error
	// Logger defaults to a text logger on stderr (the console).
	Logger *slog.Logger

	// sys replaces the syscalls (tests); allowNotPID1 lets Run run
	// outside PID 1 (tests, with a fake sys).
	sys          system
	allowNotPID1 bool
}

func (c Config) withDefaults() Config {
	if c.BaseFSType == "" {
		c.BaseFSType = "ext4"
	}
	if c.WritableFSType == "" {
		c.WritableFSType = "ext4"
	}
	if c.NewRoot == "" {
		c.NewRoot = "/newroot"
	}
	c.NewRoot = path.Clean(c.NewRoot)
	if c.DeviceTimeout <= 0 {
		c.DeviceTimeout = 10 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.sys == nil {
		c.sys = realSystem{}
	}
	return c
}

// killGrace is how long processes get after SIGKILL before the disks are
// synced anyway.
const killGrace = 2 * time.Second

// Init is a running PID 1.
type Init struct {
	cfg    Config
	log    *slog.Logger
	sys    system
	reaper *Reaper

	shutdownOnce sync.Once
	shutdownReq  chan struct{}
}

// New prepares an Init; Run starts it.
func New(cfg Config) *Init {
	cfg = cfg.withDefaults()
	return &Init{cfg: cfg, log: cfg.Logger, sys: cfg.sys, reaper: NewReaper(), shutdownReq: make(chan struct{})}
}

// Run is New(cfg).Run().
func Run(cfg Config) error { return New(cfg).Run() }

// Reaper is the Init's central reaper: start children through it (it
// implements control.Reaper).
func (in *Init) Reaper() *Reaper { return in.reaper }

// Shutdown asks Run to shut the VM down; it returns at once.
func (in *Init) Shutdown() {
	in.shutdownOnce.Do(func() { close(in.shutdownReq) })
}

// Run boots (Plan, executed), runs Main with the reaper going, and on
// SIGTERM/SIGINT/SIGPWR, Shutdown or Main's return shuts down and powers
// off. A boot failure is logged and powers off too. Run returns only if
// powering off fails (as PID 1, returning panics the kernel: the caller
// should log and hang or exit).
func (in *Init) Run() error {
	if os.Getpid() != 1 && !in.cfg.allowNotPID1 {
		return errors.New("pid1: Run must be PID 1")
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGPWR)
	defer signal.Stop(sigs)

	plan, err := Plan(in.cfg)
	if err == nil {
		err = in.execute(plan)
	}
	if err != nil {
		in.log.Error("boot failed", "err", err)
		in.sys.Sync()
		if perr := in.sys.PowerOff(); perr != nil {
			return errors.Join(err, perr)
		}
		return err
	}
	if os.Getenv("PATH") == "" {
		_ = os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if err := in.sys.LinkUp("lo"); err != nil {
		in.log.Warn("loopback up", "err", err)
	}

	// The reaper outlives Main: it reaps what shutdown terminates.
	reaperCtx, stopReaper := context.WithCancel(context.Background())
	defer stopReaper()
	reaperDone := make(chan struct{})
	go func() { _ = in.reaper.Run(reaperCtx); close(reaperDone) }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mainDone := make(chan error, 1)
	go func() {
		if in.cfg.Main == nil {
			<-ctx.Done()
			mainDone <- nil
			return
		}
		mainDone <- in.cfg.Main(ctx, in)
	}()

	select {
	case s := <-sigs:
		in.log.Info("shutting down", "signal", s.String())
	case <-in.shutdownReq:
		in.log.Info("shutting down", "reason", "requested")
	case err := <-mainDone:
		in.log.Info("shutting down", "reason", "main returned", "err", err)
		mainDone <- err
	}
	cancel()
	in.terminate(mainDone)
	stopReaper()
	<-reaperDone
	return in.powerOff()
}

// execute applies the plan, step by step.
func (in *Init) execute(plan []Step) error {
	for _, s := range plan {
		t0 := time.Now()
		if err := in.apply(s); err != nil {
			if s.Hint != "" {
				return fmt.Errorf("%s: %w %s", s, err, s.Hint)
			}
			return fmt.Errorf("%s: %w", s, err)
		}
		in.log.Debug("boot step", "step", s.String(), "took", time.Since(t0))
	}
	return nil
}

func (in *Init) apply(s Step) error {
	switch s.Kind {
	case StepMkdir:
		return in.sys.Mkdir(s.Target, s.Mode)
	case StepMount:
		if s.IfNotMounted && in.sys.IsMountPoint(s.Target) {
			return nil
		}
		return in.sys.Mount(s.Source, s.Target, s.FSType, s.Flags, s.Data)
	case StepMove:
		return in.sys.Mount(s.Source, s.Target, "", unix.MS_MOVE, "")
	case StepConsole:
		return in.sys.Console(s.Target)
	case StepLoadModule:
		return in.sys.LoadModule(s.Source)
	case StepWaitDevice:
		return in.sys.WaitDevice(s.Target, in.cfg.DeviceTimeout)
	case StepSwitchRoot:
		return in.sys.SwitchRoot(s.Target)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

// terminate stops Main and every process: SIGTERM to all, wait up to
// ShutdownTimeout (the reaper keeps reaping), SIGKILL to the rest.
func (in *Init) terminate(mainDone <-chan error) {
	_ = in.sys.Kill(-1, unix.SIGTERM)
	deadline := time.Now().Add(in.cfg.ShutdownTimeout)
	mainOver := false
	for time.Now().Before(deadline) {
		if !mainOver {
			select {
			case <-mainDone:
				mainOver = true
			default:
			}
		}
		if mainOver && in.noProcesses() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	in.log.Warn("processes left after SIGTERM: killing")
	_ = in.sys.Kill(-1, unix.SIGKILL)
	for deadline = time.Now().Add(killGrace); time.Now().Before(deadline); {
		if in.noProcesses() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (in *Init) noProcesses() bool {
	pids, err := in.sys.Processes()
	return err == nil && len(pids) == 0
}

// powerOff syncs, unmounts what can be, syncs again and powers off.
// The overlay root itself stays mounted (we run in it); its writable
// layer is synced, which is what keeps its data.
func (in *Init) powerOff() error {
	in.sys.Sync()
	var targets []string
	if !in.cfg.DiskTmp {
		targets = append(targets, "/tmp")
	}
	if in.cfg.BaseDevice != "" {
		targets = append(targets, WritableMount, BaseMount)
		if err := in.sys.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			in.log.Warn("remount / read-only", "err", err)
		}
	}
	for _, t := range targets {
		if err := in.sys.Unmount(t, unix.MNT_DETACH); err != nil {
			in.log.Warn("unmount", "target", t, "err", err)
		}
	}
	in.sys.Sync()
	in.log.Info("power off")
	if err := in.sys.PowerOff(); err != nil {
		return fmt.Errorf("pid1: power off: %w", err)
	}
	return nil
}
