// Package envd composes the envd-compatible API the E2B SDK talks to on
// port 49983: the Connect process and filesystem services, /files,
// /health, /envs, /metrics and /metrics/history, behind the access-token check and user
// resolution. Serve it with httpserve.New, whose bounds leave its streams
// alone.
package envd

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb/filesystempbconnect"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	"github.com/sandlot-dev/sandlot/guest/httpserve"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// Version is the envd version the agent reports; the SDKs gate features
// on it (>= 0.5.7 for octet-stream uploads, >= 0.6.2 for file metadata,
// >= 0.6.3 for watch events with entry info, >= 0.6.4 for watches that
// may be on network mounts): every one of them is served here.
const Version = "0.6.4"

// Config is what the server is composed of.
type Config struct {
	Root        sandboxfs.Root
	Identity    *identity.Store
	DefaultUser string
	Process     processpbconnect.ProcessHandler
	Filesystem  filesystempbconnect.FilesystemHandler
	Files       http.Handler
}

// NewHandler returns the envd HTTP handler.
func NewHandler(cfg Config) http.Handler {
	mux := http.NewServeMux()
	path, h := processpbconnect.NewProcessHandler(cfg.Process)
	mux.Handle(path, h)
	path, h = filesystempbconnect.NewFilesystemHandler(cfg.Filesystem)
	mux.Handle(path, h)
	// /files and the Connect services stream (transfers, process output,
	// watches) as long as the caller wants: no deadline on them.
	mux.Handle("/files", cfg.Files)
	// The small JSON routes are bounded whole.
	short := func(h http.Handler) http.Handler { return httpserve.Deadline(httpserve.ShortRequestTimeout, h) }
	mux.Handle("GET /envs", short(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, cfg.Identity.Env())
	})))
	metrics := &metricsSource{}
	hist := newHistory(metrics.collect, func() string { return cfg.Identity.Get().SandboxID }, historyEvery, historyMax)
	go hist.run()
	mux.Handle("GET /metrics", short(metrics))
	mux.Handle("GET /metrics/history", short(hist))
	mux.Handle("GET /health", short(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))
	return &guard{cfg: cfg, next: mux}
}

// guard checks the access token and resolves the user a request acts as.
type guard struct {
	cfg  Config
	next http.Handler
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		g.next.ServeHTTP(w, r)
		return
	}
	// /files checks the token itself: signed upload/download URLs carry a
	// signature instead of the header. It refuses as this check does
	// while there is no token and the identity is not open.
	if r.URL.Path != "/files" && !g.cfg.Identity.CheckToken(r.Header.Get("X-Access-Token")) {
		fail(w, r, http.StatusUnauthorized, "unauthenticated", "invalid or missing X-Access-Token")
		return
	}
	name, err := requestUser(r, g.cfg.DefaultUser)
	if err != nil {
		fail(w, r, http.StatusBadRequest, "invalid_argument", err.Error())
		return
	}
	if name != "" {
		u, err := g.cfg.Root.LookupUser(name)
		if err != nil {
			fail(w, r, http.StatusUnauthorized, "unauthenticated", err.Error())
			return
		}
		r = r.WithContext(sandboxfs.WithUser(r.Context(), u))
	}
	g.next.ServeHTTP(w, r)
}

// RequireToken guards another API of the sandbox (the code interpreter)
// with the same X-Access-Token check; /health stays open.
func RequireToken(ids *identity.Store, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" && !ids.CheckToken(r.Header.Get("X-Access-Token")) {
			httpserve.Refuse(w)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"code": http.StatusUnauthorized,
				"message": "invalid or missing X-Access-Token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requestUser is the user of `Authorization: Basic base64("<user>:")`, or
// the default.
func requestUser(r *http.Request, def string) (string, error) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return def, nil
	}
	enc, ok := strings.CutPrefix(auth, "Basic ")
	if !ok {
		return "", fmt.Errorf("authorization header must be Basic <base64 user:>")
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("authorization header: %w", err)
	}
	user, _, _ := strings.Cut(string(raw), ":")
	if user == "" {
		return def, nil
	}
	return user, nil
}

// fail refuses a request, answering the way the caller's protocol
// expects: a Connect error body for the RPC services, `{code, message}`
// for plain HTTP. The connection closes after it (see httpserve.Refuse).
func fail(w http.ResponseWriter, r *http.Request, status int, connectCode, msg string) {
	httpserve.Refuse(w)
	if strings.HasPrefix(r.URL.Path, "/"+processpbconnect.ProcessName+"/") ||
		strings.HasPrefix(r.URL.Path, "/"+filesystempbconnect.FilesystemName+"/") {
		writeJSON(w, status, map[string]string{"code": connectCode, "message": msg})
		return
	}
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
