// Package interpreter serves the E2B code-interpreter API (port 49999) that
// the @e2b/code-interpreter SDK's sandbox.runCode() and *CodeContext()
// calls talk to. Each context is one long-lived kernel process: for python
// an embedded, standard-library-only kernel (kernel.py) that executes cells
// like Jupyter (state persists, the last expression is the result, output
// streams live); for javascript and typescript kernel.js on node; for bash
// one bash driven by kernel_bash.py. No IPython or Jupyter is needed in the
// sandbox image.
package interpreter

import (
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Config configures a Server.
type Config struct {
	// Python is the interpreter to run kernels with; default "python3",
	// looked up in PATH.
	Python string
	// Cwd is the working directory of new contexts (a path inside the
	// sandbox); default the agent's own working directory.
	Cwd string
	// Env returns the sandbox environment kernels get; may be nil.
	Env func() map[string]string
}

// Server holds the code contexts. Its zero value is not usable; call New.
type Server struct {
	python string
	cwd    string
	env    func() map[string]string

	mu       sync.Mutex
	contexts map[string]*codeContext
	order    []string          // creation order, for listing
	defaults map[string]string // language -> its default context's ID
	closed   bool
}

// New checks that the interpreter exists and returns a Server. Kernels
// start on demand.
func New(cfg Config) (*Server, error) {
	name := cfg.Python
	if name == "" {
		name = "python3"
	}
	python, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("code interpreter needs Python 3 (%q not found: %w); "+
			"install python3 in the sandbox image (e.g. apt-get install python3 or apk add python3)", name, err)
	}
	cwd := cfg.Cwd
	if cwd == "" {
		if cwd, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("default working directory: %w", err)
		}
	}
	return &Server{python: python, cwd: cwd, env: cfg.Env, contexts: map[string]*codeContext{},
		defaults: map[string]string{}}, nil
}

// Close kills every kernel; the Server refuses executions afterwards.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	all := make([]*codeContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		c.shutdown(reasonClosed)
	}
}

var errClosed = errors.New("the code interpreter is shut down")

// newContext registers a context of lang (its kernel starts later).
func (s *Server) newContext(lang, cwd string) (*codeContext, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addLocked(lang, cwd)
}

// defaultContext returns the context of lang used when a request names
// none, creating it on first use (or again after it was deleted).
func (s *Server) defaultContext(lang string) (*codeContext, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.contexts[s.defaults[lang]]; ok {
		return c, nil
	}
	c, err := s.addLocked(lang, s.cwd)
	if err != nil {
		return nil, err
	}
	s.defaults[lang] = c.id
	return c, nil
}

func (s *Server) addLocked(lang, cwd string) (*codeContext, error) {
	if s.closed {
		return nil, errClosed
	}
	c := &codeContext{id: newID(), lang: lang, cwd: cwd, srv: s, turn: make(chan struct{}, 1)}
	s.contexts[c.id] = c
	s.order = append(s.order, c.id)
	return c, nil
}

func (s *Server) lookup(id string) (*codeContext, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.contexts[id]
	return c, ok
}

// remove unregisters a context; false if it did not exist.
func (s *Server) remove(id string) (*codeContext, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.contexts[id]
	if !ok {
		return nil, false
	}
	delete(s.contexts, id)
	for i, o := range s.order {
		if o == id {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	return c, true
}

func (s *Server) list() []Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Context, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.contexts[id].info())
	}
	return out
}

// sandboxEnv is a copy of the current sandbox environment.
func (s *Server) sandboxEnv() map[string]string {
	if s.env == nil {
		return nil
	}
	return maps.Clone(s.env())
}

// resolveCwd turns a requested context directory into a checked absolute
// path; relative paths are taken from the default directory.
func (s *Server) resolveCwd(cwd string) (string, error) {
	if cwd == "" {
		return s.cwd, nil
	}
	if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(s.cwd, cwd)
	}
	fi, err := os.Stat(cwd)
	if err != nil {
		return "", fmt.Errorf("cwd %q: %w", cwd, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("cwd %q is not a directory", cwd)
	}
	return filepath.Clean(cwd), nil
}

// newID returns a random UUID v4, the form Jupyter kernel IDs (and so E2B
// context IDs) take.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
