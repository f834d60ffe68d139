package interpreter

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sandlot-dev/sandlot/guest/httpserve"
)

// Handler returns the code-interpreter HTTP API. It does no access-token
// check; the caller wraps it like the envd API (envd.RequireToken) and
// serves it with httpserve.New.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// Everything but /execute answers at once or after a kernel (re)start:
	// each is bounded whole. /execute streams a cell's output for as long
	// as the cell runs, so it gets no deadline.
	short := func(h http.HandlerFunc) http.Handler { return httpserve.Deadline(httpserve.ShortRequestTimeout, h) }
	mux.Handle("GET /health", short(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `"OK"`)
	}))
	mux.HandleFunc("POST /execute", s.handleExecute)
	mux.Handle("POST /contexts", short(s.handleCreateContext))
	mux.Handle("GET /contexts", short(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.list())
	}))
	mux.Handle("DELETE /contexts/{id}", short(s.handleDeleteContext))
	mux.Handle("POST /contexts/{id}/restart", short(s.handleRestartContext))
	return mux
}

// handleExecute runs a cell and streams its output as newline-delimited
// JSON, each line flushed as it is produced, ending with end_of_execution.
func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request) {
	// The request itself is small JSON: bound its arrival, then lift the
	// bound for the stream, which lasts as long as the cell runs.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(httpserve.ShortRequestTimeout))
	req, err := decodeExecuteRequest(http.MaxBytesReader(w, r.Body, maxRequestBody))
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	c, status, msg := s.pickContext(req)
	if c == nil {
		httpError(w, status, msg)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	out := newStream(w)
	// Headers go out now, so time spent waiting for the context's turn
	// counts against the SDK's execution timeout, not its request timeout.
	_ = out.flush()
	c.execute(r.Context(), kernelRequest{Code: *req.Code, Env: req.EnvVars}, out)
	_ = out.line(endOfExecution, true)
}

// pickContext resolves the context an execution runs in, or the HTTP
// status and message to answer when there is none.
func (s *Server) pickContext(req executeRequest) (*codeContext, int, string) {
	if req.ContextID != "" {
		c, ok := s.lookup(req.ContextID)
		if !ok {
			return nil, http.StatusNotFound, notFound(req.ContextID)
		}
		return c, 0, ""
	}
	lang, err := normalizeLanguage(req.Language)
	if err != nil {
		return nil, http.StatusBadRequest, err.Error()
	}
	c, err := s.defaultContext(lang)
	if err != nil {
		return nil, http.StatusServiceUnavailable, err.Error()
	}
	return c, 0, ""
}

// notFound is the E2B server's wording, which the SDK's NotFoundError shows.
func notFound(id string) string { return "Context " + id + " not found" }

func (s *Server) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	req, err := decodeCreateContext(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	lang, err := normalizeLanguage(req.Language)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	cwd, err := s.resolveCwd(req.Cwd)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	c, err := s.newContext(lang, cwd)
	if err != nil {
		httpError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	// Start the kernel now: errors surface here, and the first runCode in
	// the new context does not pay for the interpreter's start.
	if _, _, err := c.ensureKernel(); err != nil {
		s.remove(c.id)
		c.shutdown(reasonDelete)
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, c.info())
}

func (s *Server) handleDeleteContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c, ok := s.remove(id)
	if !ok {
		httpError(w, http.StatusNotFound, notFound(id))
		return
	}
	c.shutdown(reasonDelete)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleRestartContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c, ok := s.lookup(id)
	if !ok {
		httpError(w, http.StatusNotFound, notFound(id))
		return
	}
	if err := c.restart(); err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// httpError answers with a plain-text body: the SDK puts a 404's body into
// its NotFoundError message, and shows others' bodies in diagnostics mode.
func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		httpError(w, http.StatusInternalServerError, fmt.Sprintf("encode response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// stream writes an execution's NDJSON lines; after the first write error
// (the client is gone) it stays failed.
type stream struct {
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func newStream(w http.ResponseWriter) *stream {
	return &stream{w: w, rc: http.NewResponseController(w)}
}

// line writes one protocol line, flushing it to the client if asked.
func (s *stream) line(b []byte, flush bool) error {
	if s.err != nil {
		return s.err
	}
	if _, err := s.w.Write(b); err != nil {
		s.err = fmt.Errorf("write execution output: %w", err)
		return s.err
	}
	if _, err := s.w.Write([]byte{'\n'}); err != nil {
		s.err = fmt.Errorf("write execution output: %w", err)
		return s.err
	}
	if flush {
		return s.flush()
	}
	return nil
}

// message writes v as one line and flushes it.
func (s *stream) message(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode execution message: %w", err)
	}
	return s.line(b, true)
}

func (s *stream) flush() error {
	if s.err == nil {
		if err := s.rc.Flush(); err != nil {
			s.err = fmt.Errorf("flush execution output: %w", err)
		}
	}
	return s.err
}
