package install

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandlot-dev/sandlot/vm"
)

// Tree is a directory copied from the installer's image onto the host.
type Tree struct {
	Src  string // in the installer's own filesystem
	Dest string // on the host (absolute, under HostRoot)
}

// installQEMU copies the QEMU bundle (vm.BundleManifest) to o.QEMU.Dest
// with its binary's loader path set to the bundle's loader there, and
// removes files an earlier bundle left. The binary and the manifest go
// last: a tree with a manifest is whole.
func (o Options) installQEMU(res *Result) error {
	src, dest := o.QEMU.Src, o.QEMU.Dest
	if _, err := os.Stat(filepath.Join(src, vm.BundleManifest)); err != nil {
		return fmt.Errorf("install QEMU: %s is not a QEMU bundle: %w", src, err)
	}
	files, err := bundleFiles(src)
	if err != nil {
		return fmt.Errorf("install QEMU: %w", err)
	}
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return fmt.Errorf("install QEMU: %w", err)
		}
		fi, err := os.Stat(filepath.Join(src, rel))
		if err != nil {
			return fmt.Errorf("install QEMU: %w", err)
		}
		if rel == vm.BundleBinary {
			if b, err = setInterpreter(b, filepath.Join(dest, vm.BundleLoader)); err != nil {
				return fmt.Errorf("install QEMU %s: %w", dest, err)
			}
		}
		p := filepath.Join(dest, rel)
		changed, err := o.write(p, b, fi.Mode().Perm())
		if err := res.record(p, changed, err); err != nil {
			return err
		}
	}
	return o.pruneTree(dest, files, res)
}

// bundleFiles lists the regular files under dir, relative, the binary and
// the manifest last; anything else (a link, a device) is refused.
func bundleFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		rel, err := filepath.Rel(dir, p)
		if rel != vm.BundleBinary && rel != vm.BundleManifest {
			files = append(files, rel)
		}
		return err
	})
	return append(files, vm.BundleBinary, vm.BundleManifest), err
}

// pruneTree removes the files under host dir dest that are not in keep.
func (o Options) pruneTree(dest string, keep []string, res *Result) error {
	root := o.host(dest)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || slices.Contains(keep, rel) {
			return err
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("install QEMU: remove stale %s: %w", p, err)
		}
		res.Changed = append(res.Changed, filepath.Join(dest, rel))
		return nil
	})
}

// uninstallQEMU removes the bundle at dest: only a directory holding a
// bundle's manifest, so a mistyped path is never emptied.
func (o Options) uninstallQEMU(dest string, res *Result) error {
	root := o.host(dest)
	if _, err := os.Lstat(filepath.Join(root, vm.BundleManifest)); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("uninstall QEMU %s: %w", dest, err)
	}
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("uninstall QEMU %s: %w", dest, err)
	}
	res.Changed = append(res.Changed, dest)
	return nil
}

// setInterpreter writes loader (absolute) into the ELF's PT_INTERP,
// left-padded with slashes (repeated slashes are one), and NUL-ended: the
// bundle left it room, the field's size cannot change in place.
func setInterpreter(b []byte, loader string) ([]byte, error) {
	if !filepath.IsAbs(loader) {
		return nil, fmt.Errorf("loader %q: want an absolute path", loader)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("QEMU binary: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		room := int(p.Filesz) - 1
		if len(loader) > room || p.Off+p.Filesz > uint64(len(b)) {
			return nil, fmt.Errorf("loader path %s is longer than the %d bytes the bundle leaves: install QEMU to a shorter directory", loader, room)
		}
		out := slices.Clone(b)
		field := out[p.Off : p.Off+p.Filesz]
		copy(field, strings.Repeat("/", room-len(loader))+loader)
		field[room] = 0
		return out, nil
	}
	return nil, errors.New("QEMU binary has no PT_INTERP: not the bundle's dynamically linked QEMU")
}
