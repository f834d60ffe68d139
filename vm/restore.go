package vm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

// Restore starts a VM from the snapshot in dir: QEMU maps the snapshot's
// memory file copy-on-write (share=off: clones share every page none of
// them wrote), loads the device state with migrate-incoming over an fd,
// lays a restored VM's changed pages over the base, then continues and
// pushes the new identity (network, hostname, env, token, a fresh RNG
// seed) through the control channel. The snapshot is never written.
//
// The manifest may name only files in dir and under roots (Confine): the
// store the snapshot is in, and the node's image cache for a base disk.
// Without roots only dir is allowed, which no snapshot with a base disk
// passes: callers pass the roots they know.
func Restore(ctx context.Context, qemu string, cfg Config, dir string, id identity.Identity, roots ...Roots) (*VM, error) {
	m, err := restorable(qemu, &cfg, dir, roots)
	if err != nil {
		return nil, err
	}
	base := *m
	base.Memory.Path = m.Memory.Abs(dir)
	v := &VM{cfg: cfg, spec: cfg.baseSpec(), QEMU: qemu, state: Created, base: &base, identity: id}
	v.spec.BaseDisk = m.BaseDisk.Abs(dir)
	v.spec.MemoryPath = base.Memory.Path
	v.spec.Incoming = true
	if err := v.move(Restoring); err != nil {
		return nil, err
	}
	if err := v.restore(ctx, dir, m); err != nil {
		_ = v.Stop()
		return nil, fmt.Errorf("restore %s from %s: %w", cfg.Name, dir, err)
	}
	return v, v.move(Running)
}

// restorable reads the manifest and checks this host can restore it and
// may open every file it names (before anything opens one).
func restorable(qemu string, cfg *Config, dir string, roots []Roots) (*snapshot.Manifest, error) {
	m, err := snapshot.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := Confine(m, dir, roots...); err != nil {
		return nil, err
	}
	cfg.VCPU, cfg.MemoryMiB = m.VCPU, m.MemoryMiB
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	qv, err := QEMUVersion(qemu)
	if err != nil {
		return nil, err
	}
	if err := m.Compatible(cfg.Accel, qv, CPUFingerprint()); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if err := m.CheckFiles(dir); err != nil {
		return nil, err
	}
	return m, nil
}

func (v *VM) restore(ctx context.Context, dir string, m *snapshot.Manifest) error {
	trace := newTrace("restore " + v.cfg.Name)
	defer trace.done()
	// The files the manifest names, confined and checked: not fixed names
	// next to it, which could be other files than those checked.
	if err := v.restoreLayer(m.Disk.Abs(dir), m.DiskExtents); err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	trace.step("disk layer copied")
	id, err := fileID(v.spec.MemoryPath)
	if err != nil {
		return err
	}
	v.ramID = id
	if err := v.launch(ctx); err != nil {
		return err
	}
	trace.step("qemu up, qmp connected")
	if err := v.dialControl(ctx); err != nil { // before the state loads: see dialControl
		return err
	}
	// The changed pages go in before the device state: loading virtio
	// state checks the queues against the rings in guest RAM.
	if m.MemoryLayer != nil {
		if err := v.applyMemoryLayer(m.MemoryLayer.Abs(dir), m.LayerRuns); err != nil {
			return err
		}
	}
	if err := v.loadState(ctx, m.State.Abs(dir)); err != nil {
		return err
	}
	trace.step("device state loaded")
	if err := v.qmpErr(v.qmp.Cont(ctx), "cont"); err != nil {
		return err
	}
	trace.step("cont")
	err = v.connect(ctx, v.identity)
	trace.step("identity pushed")
	return err
}

// loadState feeds the device state to the waiting QEMU. Announcements are
// off: the clone must not claim the snapshot's addresses from its new home
// before it has taken its own identity.
func (v *VM) loadState(ctx context.Context, state string) error {
	if err := v.qmp.SetMigrationCapabilities(ctx, map[string]bool{"x-ignore-shared": true}); err != nil {
		return v.qmpErr(err, "migration capabilities")
	}
	if err := v.qmp.SetMigrationParameters(ctx, map[string]any{"announce-rounds": 0}); err != nil {
		return v.qmpErr(err, "migration parameters")
	}
	f, err := os.Open(state)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := v.qmp.SendFD(ctx, "state", f); err != nil {
		return v.qmpErr(err, "send state fd")
	}
	if err := v.qmp.MigrateIncoming(ctx, "fd:state"); err != nil {
		return v.qmpErr(err, "migrate-incoming")
	}
	if _, err := v.qmp.WaitMigration(ctx); err != nil {
		return v.qmpErr(err, "load device state")
	}
	return nil
}

func (v *VM) applyMemoryLayer(path string, pageRuns [][2]int64) error {
	mp, err := findMapping(v.PID(), v.spec.MemoryPath)
	if err != nil {
		return err
	}
	if _, err := applyLayer(v.PID(), mp, path, pageRuns); err != nil {
		return fmt.Errorf("memory layer: %w", err)
	}
	return nil
}

// restoreLayer copies the snapshot's disk layer into the VM's new
// writable layer, created beneath the disk directory (which QEMU will
// own): a new file, never one already there or a link.
func (v *VM) restoreLayer(src string, extents [][2]int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	d, err := OpenDir(v.diskDir())
	if err != nil {
		return err
	}
	defer d.Close()
	out, err := d.Create(filepath.Base(v.spec.Layer), 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	_, err = copyInto(out, in, extents)
	return err
}
