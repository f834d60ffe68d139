package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// TempPrefix starts the name of every file an upload is being written
// to; the filesystem service's watchers leave such names out.
const TempPrefix = ".sandlot-upload-"

// writeFile streams src into a temporary file beside t and renames it
// over t, so readers see the old file or the whole new one, never half.
// The file keeps an existing file's permissions (0644 when new) and
// belongs to u.
func (h *handler) writeFile(t target, src io.Reader, u sandboxfs.User, md map[string]string) error {
	perm := fs.FileMode(0o644)
	if fi, err := os.Stat(t.host); err == nil {
		if fi.IsDir() {
			return statusf(http.StatusBadRequest, "path %s is a directory", t.sandbox)
		}
		perm = fi.Mode().Perm()
	}
	dir := filepath.Dir(t.host)
	if err := sandboxfs.MkdirAll(dir, u); err != nil {
		return writeFailure(fmt.Sprintf("creating the parent directories of %s", t.sandbox), err)
	}
	tmp, err := os.CreateTemp(dir, TempPrefix+"*")
	if err != nil {
		return writeFailure("creating "+t.sandbox, err)
	}
	defer tmp.Close() // a second close after commit's is harmless
	n, err := h.fill(tmp, src, t)
	if err == nil {
		err = setMetadata(tmp, t, md)
	}
	if err == nil {
		err = commit(tmp, t, perm, u, n)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// fill copies src into f, telling a bad request body (the client's
// fault) from a failing disk (ours).
func (h *handler) fill(f *os.File, src io.Reader, t target) (int64, error) {
	rs := &readSide{r: src}
	n, err := io.Copy(f, rs)
	if err != nil {
		if rs.err != nil {
			return 0, readFailure(rs.err, h.cfg.MaxUpload)
		}
		return 0, writeFailure("writing "+t.sandbox, err)
	}
	return n, nil
}

// setMetadata puts md on the new file before it takes the old one's
// place: what it overwrites loses its metadata, as on E2B.
func setMetadata(f *os.File, t target, md map[string]string) error {
	err := sandboxfs.SetMetadata(f, md)
	if errors.Is(err, syscall.ENOTSUP) {
		return statusf(http.StatusBadRequest, "%s: its filesystem keeps no extended attributes, so no metadata", t.sandbox)
	}
	if err != nil {
		return writeFailure("writing the metadata of "+t.sandbox, err)
	}
	return nil
}

// commit gives the written file its mode and owner and puts it in place.
func commit(f *os.File, t target, perm fs.FileMode, u sandboxfs.User, size int64) error {
	if err := f.Chmod(perm); err != nil {
		return writeFailure("writing "+t.sandbox, err)
	}
	if u.UID != 0 && os.Geteuid() == 0 {
		if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
			return writeFailure("writing "+t.sandbox, err)
		}
	}
	if err := os.Rename(f.Name(), t.host); err != nil {
		return writeFailure("writing "+t.sandbox, err)
	}
	// Truncating to its own size changes nothing, but inotify reports it
	// as a modify under the final name: a watcher (the SDK's watchDir)
	// sees the WRITE an in-place write would have given.
	_ = f.Truncate(size)
	// Close is where some filesystems report a full disk.
	if err := f.Close(); err != nil {
		return writeFailure("writing "+t.sandbox, err)
	}
	return nil
}

// readSide remembers the error its reader returned.
type readSide struct {
	r   io.Reader
	err error
}

func (s *readSide) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}

// writeFailure answers a filesystem error: 507 for a full disk, as the
// SDK turns that into NotEnoughSpaceError.
func writeFailure(what string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return statusf(http.StatusInsufficientStorage, "not enough disk space available: %s", what)
	case errors.Is(err, syscall.ENOTDIR):
		return statusf(http.StatusBadRequest, "%s: a parent is not a directory", what)
	case errors.Is(err, fs.ErrPermission):
		return statusf(http.StatusForbidden, "%s: permission denied", what)
	}
	return statusf(http.StatusInternalServerError, "%s: %v", what, sandboxfs.BareError(err))
}
