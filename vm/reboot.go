package vm

import (
	"context"
	"fmt"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

// Reboot cold-boots a VM on the disk of the snapshot in dir, its memory
// left unread: E2B's filesystem-only pause and reboot-resume. The
// snapshot's writable layer is copied as the VM's (its ext4 journal
// replays what the pause's flush left), over the snapshot's base disk;
// the kernel and initramfs are this node's. Processes and memory are
// gone; files stay. Like a Boot, the new VM's RAM is its own shared file,
// so it can be snapshotted again. The manifest is confined as Restore's.
func Reboot(ctx context.Context, a Assets, cfg Config, dir string, id identity.Identity, roots ...Roots) (*VM, error) {
	m, err := snapshot.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := Confine(m, dir, roots...); err != nil {
		return nil, err
	}
	if err := m.CheckFiles(dir); err != nil {
		return nil, err
	}
	cfg.VCPU, cfg.MemoryMiB = m.VCPU, m.MemoryMiB
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := checkFiles(map[string]string{"kernel": a.Kernel, "initramfs": a.Initrd}); err != nil {
		return nil, err
	}
	v := newBooting(a, cfg)
	v.spec.BaseDisk = m.BaseDisk.Abs(dir)
	if err := v.move(Booting); err != nil {
		return nil, err
	}
	if err := v.reboot(ctx, m.Disk.Abs(dir), m.DiskExtents, id); err != nil {
		_ = v.Stop()
		return nil, fmt.Errorf("boot %s on the disk of %s: %w", cfg.Name, dir, err)
	}
	return v, v.move(Running)
}

func (v *VM) reboot(ctx context.Context, layer string, extents [][2]int64, id identity.Identity) error {
	if err := makeRAM(v.spec.MemoryPath, v.cfg.MemoryMiB); err != nil {
		return err
	}
	if err := v.restoreLayer(layer, extents); err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	if err := v.launch(ctx); err != nil {
		return err
	}
	return v.connect(ctx, id)
}
