// Package process is envd's process service (`/process.Process/*`): it
// starts commands in the sandbox, streams their output to any number of
// clients, and takes their input, signals and terminal resizes — the way
// the e2b SDK (2.51.0) expects.
package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// closeWait bounds how long Close waits for killed processes to be reaped.
const closeWait = 5 * time.Second

// Config is what the service needs from the agent.
type Config struct {
	// Root maps the sandbox paths the SDK names (cwd) to host paths.
	Root sandboxfs.Root
	// Identity supplies the sandbox's environment variables; may be nil.
	Identity *identity.Store
	// DefaultUser is used when the request names none; "root" if empty.
	DefaultUser string
	// Chroot runs processes inside Root, so a command sees the files the
	// file APIs wrote. For an agent on the host with a temporary root; in a
	// VM the root is "/" already.
	Chroot bool
}

// Service implements processpbconnect.ProcessHandler.
type Service struct {
	cfg Config

	mu     sync.Mutex
	procs  map[uint32]*proc
	seq    uint64 // start order, to pick the newest of processes sharing a tag
	closed bool
}

var _ processpbconnect.ProcessHandler = (*Service)(nil)

// New returns the process service.
func New(cfg Config) *Service {
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "root"
	}
	return &Service{cfg: cfg, procs: map[uint32]*proc{}}
}

// Close kills (SIGKILL, whole process group) every process the service
// started and refuses new ones; it waits a little for them to be reaped so
// their streams end with an end event rather than a dropped connection.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	procs := slices.Collect(maps.Values(s.procs))
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.signal(unix.SIGKILL) // already exited is fine
	}
	deadline := time.NewTimer(closeWait)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.ended:
		case <-deadline.C:
			return
		}
	}
}

// register adds a started process to the table.
func (s *Service) register(p *proc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return connect.NewError(connect.CodeUnavailable, errors.New("the process service is shutting down"))
	}
	s.seq++
	p.seq = s.seq
	s.procs[p.pid] = p
	return nil
}

// remove drops p from the table unless its pid already names a newer
// process (the kernel may reuse a pid once p has been reaped).
func (s *Service) remove(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.procs[p.pid] == p {
		delete(s.procs, p.pid)
	}
}

// lookup finds the process a selector names, including one that has
// exited but whose output is still being delivered (Connect then gets its
// start and end events).
func (s *Service) lookup(sel *processpb.ProcessSelector) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		if p := s.procs[v.Pid]; p != nil {
			return p, nil
		}
	case *processpb.ProcessSelector_Tag:
		var newest *proc
		for _, p := range s.procs {
			if p.tag != nil && *p.tag == v.Tag && (newest == nil || p.seq > newest.seq) {
				newest = p
			}
		}
		if newest != nil {
			return newest, nil
		}
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector needs a pid or a tag"))
	}
	return nil, notFound(sel)
}

// running is lookup for operations that act on the process itself (input,
// signals, resize): an exited process is as good as gone.
func (s *Service) running(sel *processpb.ProcessSelector) (*proc, error) {
	p, err := s.lookup(sel)
	if err != nil {
		return nil, err
	}
	if p.hasExited() {
		return nil, notFound(sel)
	}
	return p, nil
}

func notFound(sel *processpb.ProcessSelector) error {
	if t, ok := sel.GetSelector().(*processpb.ProcessSelector_Tag); ok {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", t.Tag))
	}
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", sel.GetPid()))
}

// List returns the running processes, by pid.
func (s *Service) List(_ context.Context, _ *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	s.mu.Lock()
	procs := slices.Collect(maps.Values(s.procs))
	s.mu.Unlock()
	slices.SortFunc(procs, func(a, b *proc) int { return cmp.Compare(a.pid, b.pid) })
	res := &processpb.ListResponse{}
	for _, p := range procs {
		if !p.hasExited() {
			res.Processes = append(res.Processes, p.info())
		}
	}
	return connect.NewResponse(res), nil
}
