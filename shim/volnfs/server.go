package volnfs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	nfs "github.com/willscott/go-nfs"
)

// maxConns bounds the connections a Server keeps open. The guest's kernel
// uses one for NFS and a short-lived one per MOUNT; the bound exists
// because go-nfs leaves a connection open (unread, never closed) after a
// malformed request, so a hostile guest could otherwise pile up
// descriptors in the shim.
const maxConns = 16

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,63}$`)

// Export is one volume the VM may mount: the export name the guest asks
// for ("/<Name>") and the host directory.
type Export struct {
	// Name is what the guest mounts as "/<Name>": 1 to 63 of
	// [a-zA-Z0-9_-].
	Name string
	// Dir is the host directory served; nothing outside it is reached.
	Dir string
	// UID and GID own every file, directory and symlink the guest
	// creates, and are the only owner it may chown to. Both must be
	// dedicated non-root ids (> 0): see the package doc.
	UID, GID int
}

// Server serves a sandbox's exports over NFSv3 (MOUNT and NFS on one
// listener).
type Server struct {
	srv    *nfs.Server
	roots  []*rootFS
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*trackedConn]struct{}
}

// quietOnce silences go-nfs's process-wide logger: it logs every failed
// request at error level, and a hostile guest decides how many fail.
var quietOnce sync.Once

// New opens each export's directory as an os.Root. It refuses a bad or
// duplicate name and a root (or negative) owner.
func New(exports []Export) (*Server, error) {
	quietOnce.Do(func() { nfs.Log.SetLevel(nfs.PanicLevel) })
	byName := make(map[string]*rootFS, len(exports))
	s := &Server{listeners: map[net.Listener]struct{}{}, conns: map[*trackedConn]struct{}{}}
	for _, e := range exports {
		r, err := openExport(e, byName)
		if err != nil {
			s.closeRoots()
			return nil, err
		}
		byName[e.Name] = r
		s.roots = append(s.roots, r)
	}
	h, err := newHandler(byName)
	if err != nil {
		s.closeRoots()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.srv = &nfs.Server{Handler: h, Context: ctx}
	// The write verifier, fixed for the Server's life (go-nfs would draw
	// one per Serve, racing if Serve runs on two listeners).
	if _, err := rand.Read(s.srv.ID[:]); err != nil {
		cancel()
		s.closeRoots()
		return nil, fmt.Errorf("volnfs: write verifier: %w", err)
	}
	return s, nil
}

func openExport(e Export, seen map[string]*rootFS) (*rootFS, error) {
	if !nameRE.MatchString(e.Name) {
		return nil, fmt.Errorf("volnfs: export name %q: want 1 to 63 of [a-zA-Z0-9_-]", e.Name)
	}
	if _, dup := seen[e.Name]; dup {
		return nil, fmt.Errorf("volnfs: export %q given twice", e.Name)
	}
	if e.UID <= 0 || e.GID <= 0 || e.UID >= math.MaxUint32 || e.GID >= math.MaxUint32 {
		return nil, fmt.Errorf("volnfs: export %q: owner %d:%d: want a dedicated non-root uid and gid", e.Name, e.UID, e.GID)
	}
	root, err := os.OpenRoot(e.Dir)
	if err != nil {
		return nil, fmt.Errorf("volnfs: export %q: %w", e.Name, err)
	}
	return &rootFS{name: e.Name, root: root, uid: e.UID, gid: e.GID}, nil
}

// Serve answers MOUNT and NFS on l until Close (then it returns nil). The
// caller makes l where the VM can reach it (the pod's netns); Serve
// closes it.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return fmt.Errorf("volnfs: serve after Close: %w", net.ErrClosed)
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	err := s.srv.Serve(&trackingListener{Listener: l, s: s})
	s.mu.Lock()
	delete(s.listeners, l)
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil
	}
	return fmt.Errorf("volnfs: serve on %s: %w", l.Addr(), err)
}

// Close stops every Serve, drops the guest's connections and closes the
// exports' roots (requests in flight then fail).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ls, cs := s.listeners, s.conns
	s.listeners, s.conns = nil, nil
	s.mu.Unlock()
	s.cancel()
	var errs []error
	for l := range ls {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("volnfs: close listener %s: %w", l.Addr(), err))
		}
	}
	for c := range cs {
		c.Conn.Close()
	}
	return errors.Join(append(errs, s.closeRoots())...)
}

func (s *Server) closeRoots() error {
	var errs []error
	for _, r := range s.roots {
		if err := r.root.Close(); err != nil {
			errs = append(errs, fmt.Errorf("volnfs: close export %s: %w", r.name, err))
		}
	}
	return errors.Join(errs...)
}

// trackingListener registers each accepted connection, so Close can drop
// it and maxConns can bound them.
type trackingListener struct {
	net.Listener
	s *Server
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.s.track(c), nil
}

// track registers c; past maxConns it first drops the connection that
// has been idle longest (the guest only hurts its own mounts, which its
// kernel reconnects). After Close, c is closed at once and go-nfs's read
// of it ends its goroutine.
func (s *Server) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, s: s}
	tc.last.Store(time.Now().UnixNano())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return tc
	}
	var evict *trackedConn
	if len(s.conns) >= maxConns {
		for o := range s.conns {
			if evict == nil || o.last.Load() < evict.last.Load() {
				evict = o
			}
		}
		delete(s.conns, evict)
	}
	s.conns[tc] = struct{}{}
	s.mu.Unlock()
	if evict != nil {
		evict.Conn.Close()
	}
	return tc
}

// trackedConn is a guest connection; last is when it last read anything.
type trackedConn struct {
	net.Conn
	s    *Server
	last atomic.Int64
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.last.Store(time.Now().UnixNano())
	return n, err
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}
