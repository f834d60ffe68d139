// Package files is envd's plain-HTTP file transfer endpoint, /files, as
// the e2b SDK (2.51.0) uses it: GET downloads one file, POST uploads one or
// many (multipart/form-data or a raw application/octet-stream body), both
// optionally gzip-encoded and optionally authorised by a signed URL.
//
// Errors are JSON `{"code": <status>, "message": "..."}`; messages name
// sandbox paths, never host paths.
package files

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/sandlot-dev/sandlot/guest/httpserve"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// Config is what the endpoint needs from the agent.
type Config struct {
	// Root is the sandbox's view of the filesystem.
	Root sandboxfs.Root
	// DefaultUser acts for requests that name no user; empty means root.
	DefaultUser string
	// Identity holds the access token signed URLs are checked against.
	// Only an identity with no token that says Open admits anyone (E2B
	// secure=false); nil, not yet set, or no token without Open refuse.
	Identity *identity.Store
	// MaxUpload bounds a POST body in bytes, before and after gzip
	// decoding; 0 means unlimited.
	MaxUpload int64
}

// New returns the handler to mount at /files.
func New(cfg Config) http.Handler {
	return &handler{cfg: cfg}
}

type handler struct {
	cfg Config
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		err = h.download(w, r)
	case http.MethodPost:
		err = h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		err = statusf(http.StatusMethodNotAllowed, "method %s is not allowed on /files", r.Method)
	}
	if err != nil {
		var he *httpError
		if errors.As(err, &he) && he.code == http.StatusUnauthorized {
			// A refused caller must not hold the connection with a slow
			// body (signed URLs reach here without the token check).
			httpserve.Refuse(w)
		}
		writeError(w, err)
	}
}

// httpError is an error with the status it is answered with.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func statusf(code int, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

// writeError answers err as envd does; errors without a status are 500.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var he *httpError
	if errors.As(err, &he) {
		code = he.code
	}
	h := w.Header()
	h.Del("Content-Encoding")
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, err.Error()})
}

// user is who the request acts as: `username` in the query, else the
// envd server's choice (Authorization header), else the default, else root.
func (h *handler) user(r *http.Request) (sandboxfs.User, error) {
	name := r.URL.Query().Get("username")
	if name == "" {
		if u, ok := sandboxfs.UserFrom(r.Context()); ok {
			return u, nil
		}
		name = h.cfg.DefaultUser
	}
	if name == "" {
		name = "root"
	}
	u, err := h.cfg.Root.LookupUser(name)
	if err != nil {
		return sandboxfs.User{}, statusf(http.StatusUnauthorized, "user %s does not exist", name)
	}
	return u, nil
}

// target is a request path as the sandbox names it and on the host.
type target struct {
	sandbox string // absolute, cleaned
	host    string
}

// resolve maps p (absolute, or relative to u's home) into the root,
// following symlinks as the sandbox would.
func (h *handler) resolve(p string, u sandboxfs.User) (target, error) {
	if p == "" {
		return target{}, statusf(http.StatusBadRequest, "path is required")
	}
	if strings.ContainsRune(p, 0) {
		return target{}, statusf(http.StatusBadRequest, "path %q contains a NUL byte", p)
	}
	sb := p
	if !path.IsAbs(sb) {
		sb = path.Join(u.Home, sb)
	}
	sb = path.Clean(sb)
	host, err := h.cfg.Root.Resolve(sb, "/")
	if err != nil {
		if errors.Is(err, sandboxfs.ErrOutside) {
			return target{}, statusf(http.StatusBadRequest, "path %s is outside the sandbox", sb)
		}
		return target{}, statusf(http.StatusBadRequest, "invalid path %s: %v", sb, err)
	}
	return target{sandbox: sb, host: host}, nil
}
