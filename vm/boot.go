package vm

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sandlot-dev/sandlot/guest/identity"
)

var randRead = rand.Read

// Boot cold-boots a first-generation VM: kernel, initramfs with
// sandlot-guest as /init, the read-only base disk and a fresh writable
// layer; its RAM is a shared file in MemoryDir so it can be snapshotted.
// It returns once the guest agent has taken id.
func Boot(ctx context.Context, a Assets, cfg Config, id identity.Identity) (*VM, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := checkFiles(map[string]string{"kernel": a.Kernel, "initramfs": a.Initrd, "base disk": cfg.BaseDisk}); err != nil {
		return nil, err
	}
	v := newBooting(a, cfg)
	if err := v.move(Booting); err != nil {
		return nil, err
	}
	if err := v.boot(ctx, id); err != nil {
		_ = v.Stop()
		return nil, fmt.Errorf("boot %s: %w", cfg.Name, err)
	}
	return v, v.move(Running)
}

// newBooting is a VM to be booted with a's kernel and initramfs, its RAM
// a shared file of its own (so it can be snapshotted).
func newBooting(a Assets, cfg Config) *VM {
	v := &VM{cfg: cfg, spec: cfg.baseSpec(), QEMU: a.QEMU, state: Created}
	v.spec.MemoryPath = filepath.Join(cfg.MemoryDir, "sandlot-"+cfg.Name, "ram")
	v.spec.SharedMemory = true
	v.spec.Kernel, v.spec.Initrd = a.Kernel, a.Initrd
	v.spec.Append = bootArgs(a.Modules)
	return v
}

func (v *VM) boot(ctx context.Context, id identity.Identity) error {
	if err := makeRAM(v.spec.MemoryPath, v.cfg.MemoryMiB); err != nil {
		return err
	}
	if err := makeLayer(v.spec.Layer, v.cfg.LayerMiB); err != nil {
		return err
	}
	if err := v.launch(ctx); err != nil {
		return err
	}
	return v.connect(ctx, id)
}

// bootArgs is the kernel command line: the base arguments, then the boot
// parameters sandlot-guest reads as /init (the kernel passes unknown
// NAME=value words to init as environment variables).
func bootArgs(modules string) string {
	return strings.Join([]string{BaseKernelArgs, "SANDLOT_BASE=/dev/vda", "SANDLOT_LAYER=/dev/vdb",
		"SANDLOT_MODULES=" + modules}, " ")
}

// makeRAM creates the guest RAM file in a directory of its own, both
// private to root: QEMU would map a file someone else planted there, and
// guest memory holds the sandbox's secrets.
func makeRAM(path string, mib int) error {
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("guest RAM directory: %w", err)
	}
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("guest RAM directory: %w", err)
	}
	defer d.Close()
	f, err := d.Create(filepath.Base(path), 0o600)
	if err != nil {
		return fmt.Errorf("guest RAM file: %w", err)
	}
	defer f.Close()
	return f.Truncate(int64(mib) << 20)
}

// makeLayer creates a sparse writable layer formatted ext4 (the guest
// overlays its root on it). The disk directory is QEMU's to write: the
// layer is created beneath it and formatted through its fd (mkfs gets
// /dev/fd/3), so a link planted there is neither followed nor formatted.
func makeLayer(path string, mib int) error {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("create writable layer: %w", err)
	}
	defer d.Close()
	f, err := d.Create(filepath.Base(path), 0o600)
	if err != nil {
		return fmt.Errorf("create writable layer: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(mib) << 20); err != nil {
		return fmt.Errorf("size writable layer: %w", err)
	}
	cmd := exec.Command("mkfs.ext4", "-q", "-F", "-L", "sandlot-layer", "-E", "lazy_itable_init=1,lazy_journal_init=1", "/dev/fd/3")
	cmd.ExtraFiles = []*os.File{f}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("format writable layer %s (is e2fsprogs installed?): %w: %s", path, err, out)
	}
	return nil
}

// checkFiles says which named file is missing, before QEMU says it worse.
func checkFiles(files map[string]string) error {
	for what, p := range files {
		if p == "" {
			return fmt.Errorf("no %s given", what)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, p, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s %s is not a regular file", what, p)
		}
	}
	return nil
}
