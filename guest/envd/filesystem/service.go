// Package filesystem is envd's filesystem.Filesystem Connect service as the
// e2b SDK (2.51.0) calls it: stat, mkdir, move, list, remove and directory
// watching, all on the sandbox's view of the filesystem (sandboxfs.Root).
//
// Every path in a request and a reply is a sandbox path ("/home/user/x");
// host paths (which differ when the root is not "/", as in tests) never
// leave the package.
package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb/filesystempbconnect"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// Config is what the service needs from the agent.
type Config struct {
	// Root is the sandbox's view of the filesystem.
	Root sandboxfs.Root
	// DefaultUser is who a request acts as when the envd server did not
	// name a user (no `Authorization: Basic user:`); empty means root.
	DefaultUser string
}

// Service implements filesystempbconnect.FilesystemHandler.
type Service struct {
	cfg Config

	mu       sync.Mutex
	closed   bool
	watches  map[*dirWatch]struct{} // every live watch, streaming or polled
	watchers map[string]*polledWatch
}

var _ filesystempbconnect.FilesystemHandler = (*Service)(nil)

// New returns the service for cfg.
func New(cfg Config) *Service {
	return &Service{
		cfg:      cfg,
		watches:  map[*dirWatch]struct{}{},
		watchers: map[string]*polledWatch{},
	}
}

// Handler returns the route and handler to mount on the envd mux.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return filesystempbconnect.NewFilesystemHandler(s, opts...)
}

// Close stops every watcher; WatchDir streams still open end.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	watches := s.watches
	s.watches = map[*dirWatch]struct{}{}
	s.watchers = map[string]*polledWatch{}
	s.mu.Unlock()
	for w := range watches {
		w.Close()
	}
}

// target is one path of a request, as the sandbox names it and on the host.
type target struct {
	sandbox string // absolute, cleaned
	host    string
}

// user is who the request acts as: the envd server's choice, else the
// configured default, else root.
func (s *Service) user(ctx context.Context) (sandboxfs.User, error) {
	if u, ok := sandboxfs.UserFrom(ctx); ok {
		return u, nil
	}
	name := s.cfg.DefaultUser
	if name == "" {
		name = "root"
	}
	u, err := s.cfg.Root.LookupUser(name)
	if err != nil {
		return sandboxfs.User{}, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("default user: %w", err))
	}
	return u, nil
}

// resolve maps p (absolute, or relative to u's home) into the root. With
// follow the last component's symlink is followed too (list, watch,
// mkdir); without it the link itself is meant (stat, remove, move).
// userTarget resolves p for the user the request acts as.
func (s *Service) userTarget(ctx context.Context, p string, follow bool) (target, sandboxfs.User, error) {
	u, err := s.user(ctx)
	if err != nil {
		return target{}, u, err
	}
	t, err := s.resolve(p, u, follow)
	return t, u, err
}

func (s *Service) resolve(p string, u sandboxfs.User, follow bool) (target, error) {
	if p == "" {
		return target{}, connect.NewError(connect.CodeInvalidArgument, errors.New("path is empty"))
	}
	if strings.ContainsRune(p, 0) {
		return target{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q contains a NUL byte", p))
	}
	sb := p
	if !path.IsAbs(sb) {
		sb = path.Join(u.Home, sb)
	}
	sb = path.Clean(sb)
	host, err := s.hostPath(sb, follow)
	if err != nil {
		if errors.Is(err, sandboxfs.ErrOutside) {
			return target{}, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("path %s is outside the sandbox", sb))
		}
		return target{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s: %w", sb, err))
	}
	return target{sandbox: sb, host: host}, nil
}

func (s *Service) hostPath(sb string, follow bool) (string, error) {
	if follow || sb == "/" {
		return s.cfg.Root.Resolve(sb, "/")
	}
	// The parent is resolved (it may hold symlinks) but the base name is
	// kept: a cleaned absolute path has no ".." left, so it stays inside.
	parent, err := s.cfg.Root.Resolve(path.Dir(sb), "/")
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, path.Base(sb)), nil
}

// fsError turns an OS error about sandbox path sb into a Connect error
// whose message names sb, never the host path.
func fsError(op, sb string, err error) error {
	errno := sandboxfs.BareError(err)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s does not exist", sb))
	case errors.Is(err, fs.ErrPermission):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s %s: permission denied", op, sb))
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s %s: %v", op, sb, errno))
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s %s: %v", op, sb, errno))
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s %s: %v", op, sb, errno))
	case errors.Is(err, syscall.EXDEV):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s %s: cannot move across filesystems", op, sb))
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("%s %s: %v", op, sb, errno))
}
