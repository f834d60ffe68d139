package e2b

// E2B's volume content API (the SDKs' Volume.list, make_dir, get_info,
// update_metadata, read_file, write_file, remove; spec/openapi-volumecontent.yml
// in e2b-dev/E2B). A volume is a directory; every file access goes through
// an *os.Root, which keeps symbolic links and ".." inside it.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// VolumeRoots resolves a volume content request: the volume's ID and the
// bearer token → the volume's directory opened as *os.Root, or an error:
// an *apiError (401 bad token, 404 unknown volume) is answered with its
// status, any other error with 500. The handler closes the Root when the
// request is done. Implemented by the caller.
type VolumeRoots interface {
	OpenVolume(ctx context.Context, volumeID, token string) (*os.Root, error)
}

const (
	// maxVolumeUploadBytes bounds one uploaded file (PUT .../file): 413 past it.
	maxVolumeUploadBytes = 1 << 30
	// maxVolumeListEntries bounds one listing: a deep listing of a big tree
	// is held in memory to be encoded.
	maxVolumeListEntries = 100_000
	// maxVolumeListDepth is E2B's bound on GET .../dir's depth.
	maxVolumeListDepth = 10
	// What E2B's SDKs leave unsaid when they create a file or directory:
	// the sandbox's user (uid and gid 1000, E2B's "user") owns it, with
	// the modes a umask of 022 gives.
	volumeOwnerID  = 1000
	volumeFileMode = 0o644
	volumeDirMode  = 0o755
	// maxVolumePatchBytes bounds PATCH .../path's {uid, gid, mode} body.
	maxVolumePatchBytes = 64 << 10
)

// volumeContentHandler serves /volumecontent/{volumeID}/{path,dir,file}.
type volumeContentHandler struct {
	roots VolumeRoots
	mux   *http.ServeMux
	// Defaults of what it creates, and the upload bound: fields so that
	// tests can change them (a test not run as root cannot chown to 1000).
	uid, gid    int
	uploadLimit int64
	listLimit   int
}

// volumeTarget is a request's volume and the path it names in it.
type volumeTarget struct {
	root *os.Root
	rel  string // for the Root: "." for the volume's root, else "a/b"
	abs  string // as E2B reports it: "/" or "/a/b"
}

// volumeEndpoint answers one route: a status and a JSON body, or an
// error; status 0 means the endpoint wrote the response itself.
type volumeEndpoint func(w http.ResponseWriter, r *http.Request, v *volumeTarget) (int, any, *apiError)

func newVolumeContentHandler(roots VolumeRoots) http.Handler {
	h := &volumeContentHandler{roots: roots, mux: http.NewServeMux(), uid: volumeOwnerID, gid: volumeOwnerID,
		uploadLimit: maxVolumeUploadBytes, listLimit: maxVolumeListEntries}
	routes := []struct {
		method, kind string
		e            volumeEndpoint
	}{
		{"GET", "path", h.stat}, {"PATCH", "path", h.patch}, {"DELETE", "path", h.remove},
		{"GET", "dir", h.list}, {"POST", "dir", h.makeDir},
		{"GET", "file", h.read}, {"PUT", "file", h.write},
	}
	for _, rt := range routes {
		h.mux.HandleFunc(rt.method+" /volumecontent/{volumeID}/"+rt.kind, h.serve(rt.e))
	}
	// Like the rest of the API, other methods and paths get a JSON error.
	for _, kind := range []string{"path", "dir", "file"} {
		p := "/volumecontent/{volumeID}/" + kind
		h.mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, errorf(http.StatusMethodNotAllowed, "method not allowed on %s", p))
		})
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return h
}

func (h *volumeContentHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// serve authenticates the request, opens its volume and names its path
// before the endpoint runs: no route touches a volume unauthorized.
func (h *volumeContentHandler) serve(e volumeEndpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := h.open(r)
		if err != nil {
			writeError(w, err)
			return
		}
		defer v.root.Close()
		code, body, err := e(w, r, v)
		switch {
		case err != nil:
			writeError(w, err)
		case code != 0:
			writeJSON(w, code, body)
		}
	}
}

func (h *volumeContentHandler) open(r *http.Request) (*volumeTarget, *apiError) {
	token, err := bearerToken(r)
	if err != nil {
		return nil, err
	}
	// The volume first: a caller without its token learns nothing of paths.
	id := r.PathValue("volumeID")
	root, oerr := h.roots.OpenVolume(r.Context(), id, token)
	var ae *apiError
	switch {
	case errors.As(oerr, &ae):
		return nil, ae
	case oerr != nil:
		return nil, errorf(http.StatusInternalServerError, "open volume %s: %v", id, oerr)
	case root == nil:
		return nil, errorf(http.StatusInternalServerError, "open volume %s: no directory", id)
	}
	rel, abs, err := volumePath(r.URL.Query())
	if err != nil {
		root.Close()
		return nil, err
	}
	return &volumeTarget{root: root, rel: rel, abs: abs}, nil
}

// bearerToken is the volume's token: the SDKs send Authorization: Bearer
// <token> (the token Volume.create returned), never an API key.
func bearerToken(r *http.Request) (string, *apiError) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", errorf(http.StatusUnauthorized, "missing Authorization: Bearer <volume token> header")
	}
	return token, nil
}

// volumePath reads the path query parameter: volume-relative, "/" being the
// volume's root. It is cleaned as if rooted, so ".." stops at the root
// (as in E2B, which cleans it in a chroot); the Root keeps links inside.
func volumePath(q url.Values) (rel, abs string, err *apiError) {
	p := q.Get("path")
	if p == "" {
		return "", "", errorf(http.StatusBadRequest, "query parameter path is required")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", "", errorf(http.StatusBadRequest, "path %q holds a NUL byte", p)
	}
	abs = path.Clean("/" + p)
	rel = strings.TrimPrefix(abs, "/")
	if rel == "" {
		rel = "."
	}
	return rel, abs, nil
}

// volumeEntryJSON is E2B's VolumeEntryStat.
type volumeEntryJSON struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"` // file, directory, symlink or unknown
	Path   string    `json:"path"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"` // permission bits only, as E2B reports them
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"` // RFC 3339, UTC
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"` // a symbolic link's
}

// entry describes rel without following a final symbolic link: a link is
// reported as one, with its target (what it says, never resolved).
func (v *volumeTarget) entry(rel, abs string) (*volumeEntryJSON, error) {
	fi, err := v.root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	e := &volumeEntryJSON{Name: path.Base(abs), Path: abs, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()),
		Mtime: fi.ModTime().UTC()}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
		if e.Target, err = v.root.Readlink(rel); err != nil {
			return nil, fmt.Errorf("read link %s: %w", abs, err)
		}
	default:
		e.Type = "unknown"
	}
	e.UID, e.GID, e.Atime, e.Ctime = statOwnerTimes(fi)
	return e, nil
}

// statOwnerTimes reads the owner, atime and ctime (sandlot-api runs on
// Linux only); mtime stands in when fi carries no stat.
func statOwnerTimes(fi fs.FileInfo) (uid, gid uint32, atime, ctime time.Time) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fi.ModTime().UTC(), fi.ModTime().UTC()
	}
	return st.Uid, st.Gid, time.Unix(st.Atim.Unix()).UTC(), time.Unix(st.Ctim.Unix()).UTC()
}

// volumeFSError answers a failed file operation op on abs. Messages name
// the volume path and the errno only: never the host path of the volume.
func volumeFSError(err error, op, abs string) *apiError {
	status, what := http.StatusInternalServerError, errnoText(err)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		status, what = http.StatusNotFound, "no such file or directory in the volume"
	case errors.Is(err, fs.ErrExist):
		status, what = http.StatusConflict, "already exists"
	case errors.Is(err, syscall.ENOTDIR):
		status, what = http.StatusBadRequest, "not a directory (or a parent is not)"
	case errors.Is(err, syscall.EISDIR):
		status, what = http.StatusBadRequest, "is a directory"
	case escapesRoot(err):
		status, what = http.StatusForbidden, "leads outside the volume (a symbolic link points out of it)"
	case errors.Is(err, fs.ErrPermission):
		status = http.StatusForbidden
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EINVAL):
		status = http.StatusBadRequest
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		status = http.StatusInsufficientStorage
	}
	return errorf(status, "%s %q: %s", op, abs, what)
}

// escapesRoot reports os.Root's refusal of a path that leaves it; the
// error has no exported value to match.
func escapesRoot(err error) bool {
	return strings.Contains(errnoText(err), "path escapes from parent")
}

// errnoText is err without the paths os puts in front (a file opened
// through a Root is named by its host path).
func errnoText(err error) string {
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	switch {
	case errors.As(err, &pe):
		return pe.Err.Error()
	case errors.As(err, &le):
		return le.Err.Error()
	case errors.As(err, &se):
		return se.Err.Error()
	}
	return err.Error()
}

// volumeCreate is what POST .../dir and PUT .../file take in the query.
type volumeCreate struct {
	uid, gid, mode *uint32
	force          bool
}

func parseVolumeCreate(q url.Values) (volumeCreate, *apiError) {
	var c volumeCreate
	for _, p := range []struct {
		name string
		v    **uint32
	}{{"uid", &c.uid}, {"gid", &c.gid}, {"mode", &c.mode}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return c, errorf(http.StatusBadRequest, "query parameter %s: %q is not a uint32", p.name, s)
		}
		u := uint32(n)
		*p.v = &u
	}
	if err := checkVolumeIDs(c.uid, c.gid, c.mode); err != nil {
		return c, err
	}
	if s := q.Get("force"); s != "" {
		f, err := strconv.ParseBool(s)
		if err != nil {
			return c, errorf(http.StatusBadRequest, "query parameter force: %q is not a boolean", s)
		}
		c.force = f
	}
	return c, nil
}

// checkVolumeIDs refuses what chown(2) and chmod(2) would read otherwise:
// uid or gid 2^32-1 is chown's "leave unchanged", and a mode is at most
// 0o7777.
func checkVolumeIDs(uid, gid, mode *uint32) *apiError {
	for _, id := range []*uint32{uid, gid} {
		if id != nil && *id == 1<<32-1 {
			return errorf(http.StatusBadRequest, "uid and gid must be below 4294967295")
		}
	}
	if mode != nil && *mode > 0o7777 {
		return errorf(http.StatusBadRequest, "mode %#o is not a permission mode (at most 0o7777)", *mode)
	}
	return nil
}

// volumePerm is a requested mode, or def: the permission bits only. The
// API never makes a setuid or setgid file (nor a sticky one): the volume
// is mounted into sandboxes whose users did not choose its owner.
func volumePerm(mode *uint32, def fs.FileMode) fs.FileMode {
	if mode == nil {
		return def
	}
	return fs.FileMode(*mode) & fs.ModePerm
}
