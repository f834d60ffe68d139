package nodeagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// StageServer answers this node's shims (package stageapi): before a pod
// restores, its shim asks for the data's local directory. Data another
// node wrote is downloaded here first, with its dependencies; it stays
// pinned (Delete refused) until the shim releases it, or stageTTL passes
// for a shim that died in between. A request for data the pod was not
// pointed at by the controller is refused (stageguard.go).
type StageServer struct {
	layout *layout
	guard  *stageGuard
	// refusals records data refused for a restore (integrity.go); nil
	// records nothing.
	refusals *refusalReporter
	mu       sync.Mutex
	stages   map[string]func() // token → release
}

// stageTTL bounds a stage whose shim never released it.
const stageTTL = 10 * time.Minute

// maxStageBody bounds a request body: the requests are a few short fields.
const maxStageBody = 4 << 10

func newStageServer(l *layout, g *stageGuard) *StageServer {
	return &StageServer{layout: l, guard: g, stages: map[string]func(){}}
}

// Serve listens on socket until ctx ends (a manager Runnable).
func (s *StageServer) Serve(ctx context.Context, socket string) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return err
	}
	_ = os.Remove(socket) // a previous agent's
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("stage socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+stageapi.PathStage, s.stage)
	mux.HandleFunc("POST "+stageapi.PathRelease, s.release)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *StageServer) stage(w http.ResponseWriter, r *http.Request) {
	var req stageRequest
	if !decode(w, r, &req) {
		return
	}
	key, err := stageapi.Key(req.Kind, req.UID)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	checked := time.Now()
	switch err := s.guard.authorize(r.Context(), req); {
	case errors.Is(err, errStageRefused):
		log.FromContext(r.Context()).Info("refused a stage request", "key", key, "reason", err.Error())
		observeRestoreFailure(restoreRefused)
		writeError(w, http.StatusForbidden, err)
		return
	case err != nil:
		internalError(w, r, fmt.Errorf("check the stage request: %w", err))
		return
	}
	start := time.Now()
	dir, release, err := s.layout.open(r.Context(), key)
	observeStageError(err)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, err)
		return
	case errors.Is(err, store.ErrNotReady), errors.Is(err, store.ErrNotCommitted):
		writeError(w, http.StatusConflict, err)
		return
	case refusal(err) != "":
		s.refuse(r.Context(), w, req, key, err)
		return
	case err != nil:
		internalError(w, r, err)
		return
	}
	token := newToken()
	s.mu.Lock()
	s.stages[token] = release
	s.mu.Unlock()
	time.AfterFunc(stageTTL, func() { s.end(token) })
	log.FromContext(r.Context()).Info("staged for a restore", "key", key, "dir", dir, "took", time.Since(start),
		"checked", start.Sub(checked))
	root, _ := storeRoot(dir, key) // open found dir under its key
	writeJSON(w, stageapi.StageResponse{Dir: dir, Token: token, StoreRoot: root})
}

func (s *StageServer) release(w http.ResponseWriter, r *http.Request) {
	var req stageapi.ReleaseRequest
	if !decode(w, r, &req) {
		return
	}
	s.end(req.Token)
	writeJSON(w, struct{}{})
}

func (s *StageServer) end(token string) {
	s.mu.Lock()
	release := s.stages[token]
	delete(s.stages, token)
	s.mu.Unlock()
	if release != nil {
		release()
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxStageBody)).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("bad request body: %w", err))
		return false
	}
	return true
}

func writeError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(stageapi.Error{Message: err.Error()})
}

// internalError answers a failure; one caused by the agent stopping (its
// context, every request's base, canceled) is 503, which the shim asks
// again of the agent's successor instead of failing the pod.
func internalError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	if r.Context().Err() != nil {
		status = http.StatusServiceUnavailable
	}
	writeError(w, status, err)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
