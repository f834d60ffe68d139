package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fileEntry is one file of a snapshot directory.
type fileEntry struct {
	Path   string      `json:"path"` // slash-separated, relative to the key's dir
	Size   int64       `json:"size"`
	Mode   fs.FileMode `json:"mode"`
	SHA256 string      `json:"sha256,omitempty"` // of the whole file, holes read as zeros
	// Extents are the data runs {offset, length} of a sparse file: its
	// object holds them back to back and the holes are not stored (a 1 GiB
	// writable layer with 30 MB written moves 30 MB). Nil: the whole file.
	Extents [][2]int64 `json:"extents,omitempty"`
	// ObjectSHA256 is the sha256 of the object of a file with Extents (its
	// data runs back to back): a download checks what it receives, and
	// the holes, zeros by construction, cost nothing to check.
	ObjectSHA256 string `json:"objectSHA256,omitempty"`
}

// objectSum is the sha256 the file's object must have.
func (f fileEntry) objectSum() string {
	if f.Extents == nil {
		return f.SHA256
	}
	return f.ObjectSHA256
}

// objectSize is what the file's object holds.
func (f fileEntry) objectSize() int64 {
	if f.Extents == nil {
		return f.Size
	}
	var n int64
	for _, e := range f.Extents {
		n += e[1]
	}
	return n
}

// runs are the file's data runs: its extents, or the whole file.
func (f fileEntry) runs() [][2]int64 {
	if f.Extents == nil {
		return [][2]int64{{0, f.Size}}
	}
	return f.Extents
}

// dataExtents finds the data runs of a file with SEEK_DATA/SEEK_HOLE; nil
// when it has no holes. A file of holes only is one empty run.
func dataExtents(path string, size int64) ([][2]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fd := int(f.Fd())
	var ext [][2]int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return nil, fmt.Errorf("seek data in %s: %w", path, err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("seek hole in %s: %w", path, err)
		}
		hole = min(hole, size)
		ext = append(ext, [2]int64{data, hole - data})
		off = hole
	}
	switch {
	case len(ext) == 1 && ext[0] == [2]int64{0, size}:
		return nil, nil
	case ext == nil && size > 0:
		return [][2]int64{{0, 0}}, nil
	}
	return ext, nil
}

// scanDir lists the regular files under dir. Anything else (symlinks,
// devices) is refused: another node could not reproduce it from objects.
// A missing dir is reported as fs.ErrNotExist.
func scanDir(dir string) ([]fileEntry, error) {
	var files []fileEntry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file (%s)", p, d.Type())
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files = append(files, fileEntry{Path: filepath.ToSlash(rel), Size: fi.Size(), Mode: fi.Mode().Perm()})
		return nil
	})
	return files, err
}

func sumSizes(files []fileEntry) int64 {
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}

// allocated is the disk really taken under root (holes of sparse files
// excluded); files vanishing during the walk are skipped.
func allocated(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// hashFile is the sha256 and size of the file at p.
func hashFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, 1<<20))
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// hashSparse is the sha256 of the file at p (holes read as zeros) and of
// its data runs ext back to back (its object), in one read of the file.
func hashSparse(p string, ext [][2]int64) (sum, objSum string, n int64, err error) {
	f, err := os.Open(p)
	if err != nil {
		return "", "", 0, err
	}
	defer f.Close()
	whole, obj := sha256.New(), sha256.New()
	buf := make([]byte, 1<<20)
	for {
		c, rerr := f.Read(buf)
		for _, e := range ext { // the part of the chunk in each run
			lo, hi := max(e[0], n), min(e[0]+e[1], n+int64(c))
			if lo < hi {
				obj.Write(buf[lo-n : hi-n])
			}
		}
		whole.Write(buf[:c])
		n += int64(c)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return "", "", n, fmt.Errorf("read %s: %w", p, rerr)
		}
	}
	return hex.EncodeToString(whole.Sum(nil)), hex.EncodeToString(obj.Sum(nil)), n, nil
}

// escapeKey makes a key one file name (keys are validated, so this is
// reversible and collision-free).
func escapeKey(key string) string { return url.PathEscape(key) }

func unescapeKey(name string) (string, error) { return url.PathUnescape(name) }

// writeJSON replaces path with v atomically and durably: a crash leaves
// the old or the new content, never a torn file.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data)
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

// syncDir makes a rename or create in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

func exists(p string) (bool, error) {
	_, err := os.Lstat(p)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// removeAll removes a snapshot dir whose files and dirs may be read-only.
func removeAll(p string) error {
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// uncommitted is the error for a key whose dir exists but was never
// committed, or ErrNotFound when there is nothing at all.
func uncommitted(op, key, dir string) error {
	ok, err := exists(dir)
	switch {
	case err != nil:
		return fmt.Errorf("store: %s %s: %w", op, key, err)
	case ok:
		return fmt.Errorf("store: %s %s: %w (%s was written but never committed)", op, key, ErrNotCommitted, dir)
	default:
		return fmt.Errorf("store: %s %s: %w", op, key, ErrNotFound)
	}
}
