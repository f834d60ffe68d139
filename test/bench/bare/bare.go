// Package bare is the floor sandlot's benchmarks read their figures
// against: a clone of a snapshot started with the bare QEMU sequence —
// QEMU with -incoming defer mapping the snapshot's memory copy-on-write,
// getfd + migrate-incoming fd:, cont — on the same command line and
// device state as sandlot's VMs (QEMU's own seccomp sandbox included),
// without sandlot's layer: no manifest checks, no memory layer, no jail,
// no pod, no identity push (the guest keeps the snapshot's address and is
// reached over QEMU's user-mode network, its envd port forwarded to a
// host port).
package bare

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
	"github.com/sandlot-dev/sandlot/vm/qmp"
)

// Clone is a running bare QEMU clone.
type Clone struct {
	cmd *exec.Cmd
	dir string
}

// Stop kills the clone's QEMU and removes its directory.
func (c *Clone) Stop() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	_ = os.RemoveAll(c.dir)
}

// PID is the clone's QEMU process.
func (c *Clone) PID() int { return c.cmd.Process.Pid }

// Staged is a clone ready to start: its writable disk copied, so the copy
// is not timed.
type Staged struct {
	snap, dir, layer string
	m                *snapshot.Manifest
}

// Stage copies snap's writable disk into dir (created; removed by the
// clone's Stop, or by Discard if it never starts).
func Stage(snap, dir string) (*Staged, error) {
	m, err := snapshot.ReadManifest(snap)
	if err != nil {
		return nil, fmt.Errorf("stage a bare clone of %s: %w", snap, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("stage a bare clone of %s: %w", snap, err)
	}
	layer := filepath.Join(dir, "disk.raw")
	if out, err := exec.Command("cp", "--sparse=always", filepath.Join(snap, snapshot.DiskFile), layer).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("stage a bare clone of %s: cp: %w: %s", snap, err, out)
	}
	if err := os.Chmod(layer, 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("stage a bare clone of %s: %w", snap, err)
	}
	return &Staged{snap: snap, dir: dir, layer: layer, m: m}, nil
}

// Discard removes a staged clone that was not started.
func (s *Staged) Discard() { _ = os.RemoveAll(s.dir) }

// Start starts the staged clone on g's network and returns it once ready
// (called after cont) returned, with the time from QEMU's exec until then.
func (s *Staged) Start(ctx context.Context, g vmtest.Guest, ready func(context.Context) error) (*Clone, time.Duration, error) {
	m := s.m
	spec := vm.Spec{Name: "bare", Accel: m.Accel, VCPU: m.VCPU, MemoryMiB: m.MemoryMiB, MemoryPath: filepath.Join(s.snap, snapshot.MemoryFile),
		BaseDisk: m.BaseDisk.Path, Layer: s.layer, QMPSocket: filepath.Join(s.dir, "qmp.sock"), ControlSocket: filepath.Join(s.dir, "ctl.sock"),
		Net: g.Net, Incoming: true, Sandbox: true}
	args, err := spec.Args()
	if err != nil {
		s.Discard()
		return nil, 0, fmt.Errorf("bare clone of %s: %w", s.snap, err)
	}
	start := time.Now()
	c := &Clone{cmd: exec.Command("qemu-system-x86_64", args...), dir: s.dir}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		s.Discard()
		return nil, 0, fmt.Errorf("bare clone of %s: %w", s.snap, err)
	}
	if err := load(ctx, spec.QMPSocket, filepath.Join(s.snap, snapshot.StateFile)); err != nil {
		c.Stop()
		return nil, 0, fmt.Errorf("bare clone of %s: %w", s.snap, err)
	}
	if err := ready(ctx); err != nil {
		c.Stop()
		return nil, 0, fmt.Errorf("bare clone of %s: %w", s.snap, err)
	}
	return c, time.Since(start), nil
}

// Restore stages and starts a clone of snap in dir: the floor of a
// restore, timed until ready returned (bench-vm's: envd's /health).
func Restore(ctx context.Context, snap, dir string, g vmtest.Guest, ready func(context.Context) error) (*Clone, time.Duration, error) {
	s, err := Stage(snap, dir)
	if err != nil {
		return nil, 0, err
	}
	return s.Start(ctx, g, ready)
}

// load is the incoming migration of the device state (the RAM is the
// mapped memory file: x-ignore-shared), then cont.
func load(ctx context.Context, sock, state string) error {
	mon, err := qmp.Dial(ctx, sock)
	if err != nil {
		return err
	}
	defer mon.Close()
	if err := mon.SetMigrationCapabilities(ctx, map[string]bool{"x-ignore-shared": true}); err != nil {
		return err
	}
	st, err := os.Open(state)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := mon.SendFD(ctx, "st", st); err != nil {
		return err
	}
	if err := mon.MigrateIncoming(ctx, "fd:st"); err != nil {
		return err
	}
	if _, err := mon.WaitMigration(ctx); err != nil {
		return err
	}
	return mon.Cont(ctx)
}
