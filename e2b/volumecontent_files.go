package e2b

// The volume content API's routes (volumecontent.go routes and checks).

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// stat is GET .../path: the entry at path (a symbolic link as one).
func (h *volumeContentHandler) stat(_ http.ResponseWriter, _ *http.Request, v *volumeTarget) (int, any, *apiError) {
	e, err := v.entry(v.rel, v.abs)
	if err != nil {
		return 0, nil, volumeFSError(err, "stat", v.abs)
	}
	return http.StatusOK, e, nil
}

// patch is PATCH .../path {uid?, gid?, mode?}: chmod and chown, following
// a symbolic link (inside the volume) as E2B does.
func (h *volumeContentHandler) patch(w http.ResponseWriter, r *http.Request, v *volumeTarget) (int, any, *apiError) {
	var body struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxVolumePatchBytes))
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) { // no body: nothing to change
		return 0, nil, errorf(http.StatusBadRequest, "body: want {uid?, gid?, mode?} (uint32s): %v", err)
	}
	if err := checkVolumeIDs(body.UID, body.GID, body.Mode); err != nil {
		return 0, nil, err
	}
	if _, err := v.root.Lstat(v.rel); err != nil {
		return 0, nil, volumeFSError(err, "update", v.abs)
	}
	if body.Mode != nil {
		if err := v.root.Chmod(v.rel, volumePerm(body.Mode, 0)); err != nil {
			return 0, nil, volumeFSError(err, "chmod", v.abs)
		}
	}
	if body.UID != nil || body.GID != nil {
		uid, gid := -1, -1 // chown's "leave unchanged"
		if body.UID != nil {
			uid = int(*body.UID)
		}
		if body.GID != nil {
			gid = int(*body.GID)
		}
		if err := v.root.Chown(v.rel, uid, gid); err != nil {
			return 0, nil, volumeFSError(err, "chown", v.abs)
		}
	}
	return h.stat(w, r, v)
}

// remove is DELETE .../path: the file, link or whole directory tree (the
// SDKs send no recursive flag; E2B removes trees).
func (h *volumeContentHandler) remove(_ http.ResponseWriter, _ *http.Request, v *volumeTarget) (int, any, *apiError) {
	if v.rel == "." {
		return 0, nil, errorf(http.StatusBadRequest, "cannot delete the volume's root")
	}
	// RemoveAll succeeds on nothing; the SDKs expect 404 for a missing path.
	if _, err := v.root.Lstat(v.rel); err != nil {
		return 0, nil, volumeFSError(err, "delete", v.abs)
	}
	if err := v.root.RemoveAll(v.rel); err != nil {
		return 0, nil, volumeFSError(err, "delete", v.abs)
	}
	return http.StatusNoContent, nil, nil
}

// list is GET .../dir?depth=: the entries under path, depth levels deep
// (default 1, at most 10), each directory followed by its own entries.
func (h *volumeContentHandler) list(_ http.ResponseWriter, r *http.Request, v *volumeTarget) (int, any, *apiError) {
	depth := 1
	if s := r.URL.Query().Get("depth"); s != "" {
		n, err := parseVolumeDepth(s)
		if err != nil {
			return 0, nil, err
		}
		depth = n
	}
	out := make([]*volumeEntryJSON, 0)
	if err := h.listDir(v, v.rel, v.abs, depth, &out); err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return 0, nil, ae
		}
		return 0, nil, volumeFSError(err, "list", v.abs)
	}
	return http.StatusOK, out, nil
}

// parseVolumeDepth reads depth (a uint32) as E2B does: 0 is 1, above 10
// is refused.
func parseVolumeDepth(s string) (int, *apiError) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, "query parameter depth: %q is not a uint32", s)
	}
	if n > maxVolumeListDepth {
		return 0, errorf(http.StatusBadRequest, "depth must be between 1 and %d", maxVolumeListDepth)
	}
	return max(int(n), 1), nil
}

// listDir appends the entries of directory rel (reported as abs), sorted by
// name, descending into directories (not links to them) while depth lasts.
func (h *volumeContentHandler) listDir(v *volumeTarget, rel, abs string, depth int, out *[]*volumeEntryJSON) error {
	// Non-blocking: a FIFO at rel opens at once, then fails as no directory.
	d, err := v.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("read directory %s: %w", abs, err)
	}
	slices.Sort(names)
	for _, name := range names {
		crel, cabs := path.Join(rel, name), path.Join(abs, name)
		// Each entry is stat'ed through the Root, not by the host path
		// the directory's File carries: a renamed parent cannot leak.
		e, err := v.entry(crel, cabs)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listed
		}
		if err != nil {
			return err
		}
		if len(*out) >= h.listLimit {
			return errorf(http.StatusBadRequest, "list %q: more than %d entries; ask for a smaller depth", v.abs, h.listLimit)
		}
		*out = append(*out, e)
		if e.Type == "directory" && depth > 1 {
			if err := h.listDir(v, crel, cabs, depth-1, out); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// makeDir is POST .../dir?uid=&gid=&mode=&force=: 201 and the new
// directory. force creates missing parents and accepts an existing
// directory (left as it is); without it an existing path is 409.
func (h *volumeContentHandler) makeDir(_ http.ResponseWriter, r *http.Request, v *volumeTarget) (int, any, *apiError) {
	c, aerr := parseVolumeCreate(r.URL.Query())
	if aerr != nil {
		return 0, nil, aerr
	}
	own := h.owner(c, volumeDirMode)
	if c.force {
		if err := h.mkdirParents(v, path.Dir(v.rel), own.uid, own.gid); err != nil {
			return 0, nil, volumeFSError(err, "create directory", v.abs)
		}
	}
	err := h.mkdirOwned(v, v.rel, own)
	switch {
	case errors.Is(err, fs.ErrExist) && c.force:
		if err := isDir(v, v.rel); errors.Is(err, syscall.ENOTDIR) {
			return 0, nil, errorf(http.StatusConflict, "create directory %q: a file (not a directory) is there", v.abs)
		} else if err != nil {
			return 0, nil, volumeFSError(err, "create directory", v.abs)
		}
	case errors.Is(err, fs.ErrExist):
		return 0, nil, errorf(http.StatusConflict, "create directory %q: already exists (force=true accepts a directory)", v.abs)
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil, errorf(http.StatusNotFound, "create directory %q: its parent does not exist (force=true creates it)", v.abs)
	case err != nil:
		return 0, nil, volumeFSError(err, "create directory", v.abs)
	}
	e, err := v.entry(v.rel, v.abs)
	if err != nil {
		return 0, nil, volumeFSError(err, "stat", v.abs)
	}
	return http.StatusCreated, e, nil
}

// volumeOwner is the owner and mode of what a request creates.
type volumeOwner struct {
	uid, gid int
	mode     fs.FileMode
}

func (h *volumeContentHandler) owner(c volumeCreate, def fs.FileMode) volumeOwner {
	o := volumeOwner{uid: h.uid, gid: h.gid, mode: volumePerm(c.mode, def)}
	if c.uid != nil {
		o.uid = int(*c.uid)
	}
	if c.gid != nil {
		o.gid = int(*c.gid)
	}
	return o
}

// mkdirOwned makes directory rel (private until it has its owner), then
// sets owner and mode: chmod after mkdir, so that no umask trims the mode.
func (h *volumeContentHandler) mkdirOwned(v *volumeTarget, rel string, own volumeOwner) error {
	if err := v.root.Mkdir(rel, 0o700); err != nil {
		return err
	}
	err := v.root.Chown(rel, own.uid, own.gid)
	if err == nil {
		err = v.root.Chmod(rel, own.mode)
	}
	if err != nil {
		_ = v.root.Remove(rel) // not left half made: it is empty and ours
		return fmt.Errorf("set owner and mode of new directory %s: %w", rel, err)
	}
	return nil
}

// mkdirParents makes the missing directories of dir, owned by the
// request's uid and gid with the default directory mode (as E2B does).
func (h *volumeContentHandler) mkdirParents(v *volumeTarget, dir string, uid, gid int) error {
	if dir == "." {
		return nil
	}
	own := volumeOwner{uid: uid, gid: gid, mode: volumeDirMode}
	cur := ""
	for part := range strings.SplitSeq(dir, "/") {
		cur = path.Join(cur, part)
		err := h.mkdirOwned(v, cur, own)
		if errors.Is(err, fs.ErrExist) {
			err = isDir(v, cur)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// isDir checks that rel, which exists, is a directory (or a link to one
// inside the volume): ENOTDIR if not.
func isDir(v *volumeTarget, rel string) error {
	fi, err := v.root.Stat(rel)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "mkdir", Path: rel, Err: syscall.ENOTDIR}
	}
	return nil
}

// read is GET .../file: the bytes of a regular file.
func (h *volumeContentHandler) read(w http.ResponseWriter, r *http.Request, v *volumeTarget) (int, any, *apiError) {
	// Non-blocking: a FIFO or device opens at once and is refused below
	// (a FIFO would hang the request); a regular file reads as ever.
	f, err := v.root.OpenFile(v.rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return 0, nil, volumeFSError(err, "read file", v.abs)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, nil, volumeFSError(err, "read file", v.abs)
	}
	if fi.IsDir() {
		return 0, nil, errorf(http.StatusBadRequest, "read file %q: is a directory", v.abs)
	}
	if !fi.Mode().IsRegular() {
		return 0, nil, errorf(http.StatusBadRequest, "read file %q: not a regular file", v.abs)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", fi.ModTime(), f)
	return 0, nil, nil
}

// write is PUT .../file?uid=&gid=&mode=&force=, the body the file's bytes:
// 201 and the file. Without force an existing path is 409 and a missing
// parent 404; force makes the parents and replaces the file.
func (h *volumeContentHandler) write(w http.ResponseWriter, r *http.Request, v *volumeTarget) (int, any, *apiError) {
	c, aerr := parseVolumeCreate(r.URL.Query())
	if aerr != nil {
		return 0, nil, aerr
	}
	if v.rel == "." {
		return 0, nil, errorf(http.StatusBadRequest, "write file %q: is a directory", v.abs)
	}
	if r.ContentLength > h.uploadLimit {
		return 0, nil, h.tooLarge(v)
	}
	body := &bodyReader{r: http.MaxBytesReader(w, r.Body, h.uploadLimit)}
	if c.force {
		own := h.owner(c, volumeFileMode)
		if err := h.mkdirParents(v, path.Dir(v.rel), own.uid, own.gid); err != nil {
			return 0, nil, volumeFSError(err, "write file", v.abs)
		}
		aerr = h.replace(v, body, c)
	} else {
		aerr = h.create(v, body, h.owner(c, volumeFileMode))
	}
	if aerr != nil {
		return 0, nil, aerr
	}
	e, err := v.entry(v.rel, v.abs)
	if err != nil {
		return 0, nil, volumeFSError(err, "stat", v.abs)
	}
	return http.StatusCreated, e, nil
}

func (h *volumeContentHandler) tooLarge(v *volumeTarget) *apiError {
	return errorf(http.StatusRequestEntityTooLarge, "write file %q: the body is over the %d-byte limit", v.abs, h.uploadLimit)
}

// create writes a new file in place: O_EXCL refuses an existing path (a
// dangling link included), and a failed upload removes the file.
func (h *volumeContentHandler) create(v *volumeTarget, body *bodyReader, own volumeOwner) *apiError {
	f, err := v.root.OpenFile(v.rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		if fi, serr := v.root.Stat(v.rel); serr == nil && fi.IsDir() {
			return errorf(http.StatusBadRequest, "write file %q: is a directory", v.abs)
		}
		return errorf(http.StatusConflict, "write file %q: already exists (force=true overwrites it)", v.abs)
	case errors.Is(err, fs.ErrNotExist):
		return errorf(http.StatusNotFound, "write file %q: its parent directory does not exist (force=true creates it)", v.abs)
	case err != nil:
		return volumeFSError(err, "write file", v.abs)
	}
	aerr := h.fill(v, f, body, own)
	if cerr := f.Close(); cerr != nil && aerr == nil {
		aerr = volumeFSError(cerr, "write file", v.abs)
	}
	if aerr != nil {
		_ = v.root.Remove(v.rel) // best effort: the upload failed anyway
	}
	return aerr
}

// replace writes the file beside its target and renames it over it:
// readers see the old file or the new one, and a failed upload leaves the
// old one. A replaced file keeps its owner and mode unless the request
// sets them; a symbolic link at path is replaced, not written through.
func (h *volumeContentHandler) replace(v *volumeTarget, body *bodyReader, c volumeCreate) *apiError {
	own := h.owner(c, volumeFileMode)
	if fi, err := v.root.Lstat(v.rel); err == nil {
		if fi.IsDir() {
			return errorf(http.StatusBadRequest, "write file %q: is a directory", v.abs)
		}
		if fi.Mode().IsRegular() {
			uid, gid, _, _ := statOwnerTimes(fi)
			own = volumeOwner{uid: pick(c.uid, uid), gid: pick(c.gid, gid), mode: volumePerm(c.mode, fi.Mode().Perm())}
		}
	}
	tmp, err := tempName(path.Dir(v.rel))
	if err != nil {
		return errorf(http.StatusInternalServerError, "write file %q: %v", v.abs, err)
	}
	f, err := v.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return volumeFSError(err, "write file", v.abs)
	}
	aerr := h.fill(v, f, body, own)
	if cerr := f.Close(); cerr != nil && aerr == nil {
		aerr = volumeFSError(cerr, "write file", v.abs)
	}
	if aerr == nil {
		if err := v.root.Rename(tmp, v.rel); err != nil {
			aerr = volumeFSError(err, "write file", v.abs)
		}
	}
	if aerr != nil {
		_ = v.root.Remove(tmp) // best effort: the upload failed anyway
	}
	return aerr
}

// pick is the requested id, or have.
func pick(req *uint32, have uint32) int {
	if req != nil {
		return int(*req)
	}
	return int(have)
}

// tempName is a fresh hidden name in dir for an upload in progress.
func tempName(dir string) (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("draw a temporary name: %w", err)
	}
	return path.Join(dir, ".sandlot-upload-"+hex.EncodeToString(b)), nil
}

// fill copies the body into f, then gives f its owner and mode through
// the open file (no path to swap under it) and syncs it.
func (h *volumeContentHandler) fill(v *volumeTarget, f *os.File, body *bodyReader, own volumeOwner) *apiError {
	_, err := io.Copy(f, body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(body.err, &tooBig):
		return h.tooLarge(v)
	case body.err != nil:
		return errorf(http.StatusBadRequest, "write file %q: read the body: %v", v.abs, body.err)
	case err != nil:
		return volumeFSError(err, "write file", v.abs)
	}
	// chown before chmod: chown clears setuid bits, chmod sets the mode.
	if err := f.Chown(own.uid, own.gid); err != nil {
		return volumeFSError(err, "chown file", v.abs)
	}
	if err := f.Chmod(own.mode); err != nil {
		return volumeFSError(err, "chmod file", v.abs)
	}
	if err := f.Sync(); err != nil {
		return volumeFSError(err, "sync file", v.abs)
	}
	return nil
}

// bodyReader keeps the request body's error apart from the file's in a
// copy: a short body is the client's fault, a full disk the server's.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}
