package vm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

// A manifest is data: whoever can write the store it came from (a bucket,
// a shared volume) wrote it, and its paths pick what this node's QEMU
// opens — as guest RAM, as a disk, as pages written into the guest. So a
// restore opens only files under roots the node itself chose.

// Roots are the directories a snapshot's files may be in, besides the
// snapshot's own directory.
type Roots struct {
	// Store is the store's root on this node. The memory base of a
	// restored VM's snapshot is another snapshot's memory in the same
	// store ("../<other>/memory", or its absolute path), and a shared
	// store keeps the base disks too.
	Store string
	// Images are further directories the base disk may be in: the node's
	// image cache, where a local store's snapshots keep it.
	Images []string
}

// ConfineError is a manifest naming a file a restore must not open.
type ConfineError struct {
	Field  string // the manifest's field (json name)
	Path   string // as the manifest says
	Reason string
}

func (e *ConfineError) Error() string {
	return fmt.Sprintf("manifest %s %q refused: %s", e.Field, e.Path, e.Reason)
}

// Confine checks every file m, the manifest of the snapshot in dir, names:
// the snapshot's own files (state, disk, memoryLayer) inside dir, the
// memory base inside dir or a store root, the base disk inside dir, a
// store root or an image directory. Paths are resolved (symlinks
// followed) before the check, and each must be a regular file whose
// path QEMU cannot read as options or a protocol. With no roots only
// dir is allowed. A missing file is an ordinary error; a refused one a
// *ConfineError.
func Confine(m *snapshot.Manifest, dir string, roots ...Roots) error {
	own, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", dir, err)
	}
	stores, images, err := resolveRoots(roots)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", dir, err)
	}
	stores = append([]string{own}, stores...)
	refs := []struct {
		field   string
		ref     *snapshot.FileRef
		allowed []string
	}{
		{"state", &m.State, stores[:1]},
		{"disk", &m.Disk, stores[:1]},
		{"memoryLayer", m.MemoryLayer, stores[:1]},
		{"memory", &m.Memory, stores},
		{"baseDisk", &m.BaseDisk, append(stores, images...)},
	}
	for _, r := range refs {
		if r.ref == nil {
			continue
		}
		if err := confineRef(dir, r.field, *r.ref, r.allowed, len(roots) == 0); err != nil {
			return fmt.Errorf("snapshot %s: %w", dir, err)
		}
	}
	return nil
}

// resolveRoots resolves the roots' symlinks (a store under a symlinked
// directory is still that store). A root that does not exist holds no
// file, so it allows none.
func resolveRoots(roots []Roots) (stores, images []string, err error) {
	resolve := func(p string, into *[]string) error {
		if p == "" {
			return nil
		}
		if !filepath.IsAbs(p) {
			return fmt.Errorf("restore root %q is not absolute", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("restore root: %w", err)
		}
		*into = append(*into, real)
		return nil
	}
	for _, r := range roots {
		if err := resolve(r.Store, &stores); err != nil {
			return nil, nil, err
		}
		for _, img := range r.Images {
			if err := resolve(img, &images); err != nil {
				return nil, nil, err
			}
		}
	}
	return stores, images, nil
}

// confineRef checks one file against the directories allowed for it.
func confineRef(dir, field string, f snapshot.FileRef, allowed []string, noRoots bool) error {
	refuse := func(format string, args ...any) error {
		return &ConfineError{Field: field, Path: f.Path, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case f.Path == "":
		return refuse("empty path")
	case strings.ContainsAny(f.Path, ",:\x00\n"):
		// QEMU splits its options at commas and reads "nbd:...",
		// "file:...", "json:..." as protocols, not files.
		return refuse("contains ',' or ':' (QEMU would read it as options or a protocol)")
	}
	real, err := filepath.EvalSymlinks(f.Abs(dir))
	if err != nil {
		return fmt.Errorf("manifest %s %q: %w", field, f.Path, err)
	}
	if !withinAny(real, allowed) {
		where := "the allowed roots " + strings.Join(allowed, ", ")
		if noRoots {
			where = "the snapshot's directory (the restore was given no store or image roots)"
		}
		return refuse("resolves to %s, outside %s", real, where)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("manifest %s %q: %w", field, f.Path, err)
	}
	if !fi.Mode().IsRegular() {
		return refuse("%s is not a regular file (a %s)", real, fileKind(fi.Mode()))
	}
	return nil
}

// withinAny: p is inside one of the (resolved) directories.
func withinAny(p string, dirs []string) bool {
	for _, d := range dirs {
		rel, err := filepath.Rel(d, p)
		if err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "block device"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return m.Type().String()
}
