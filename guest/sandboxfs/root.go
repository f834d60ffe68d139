// Package sandboxfs is the sandbox's view of the filesystem: paths the
// SDK names ("/home/user/x") resolved under the guest's root directory,
// never outside it, and the users of that root's /etc/passwd.
//
// In a VM the root is "/" and the view is the identity; run on the host
// (tests, benchmarks) the root is a temporary directory.
package sandboxfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrOutside is returned for a path that would leave the sandbox's view.
var ErrOutside = errors.New("path is outside the sandbox")

// Root maps sandbox paths to host paths under Dir.
type Root struct {
	// Dir is the host directory that is "/" inside the sandbox.
	Dir string
}

// New returns the view rooted at dir (made absolute).
func New(dir string) (Root, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Root{}, fmt.Errorf("sandbox root %q: %w", dir, err)
	}
	return Root{Dir: abs}, nil
}

// Resolve turns a sandbox path into a host path. Relative paths are taken
// from home (the user's home directory inside the sandbox). Symlinks inside
// the root are followed as the sandbox would see them (an absolute target
// is relative to the root); a path that still escapes is refused.
func (r Root) Resolve(p, home string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path")
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	if !path.IsAbs(p) {
		p = path.Join(home, p)
	}
	clean := path.Clean(p)
	if r.Dir == "/" {
		return clean, nil
	}
	host, err := r.follow(clean, 0)
	if err != nil {
		return "", err
	}
	return host, nil
}

// follow resolves symlinks component by component, keeping every step
// inside the root.
func (r Root) follow(clean string, depth int) (string, error) {
	if depth > 40 {
		return "", fmt.Errorf("%s: too many levels of symbolic links", clean)
	}
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	cur := "/"
	for i, part := range parts {
		if part == "" {
			continue
		}
		next := path.Join(cur, part)
		fi, err := os.Lstat(filepath.Join(r.Dir, next))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			cur = next // missing components are fine (files about to be created)
			continue
		}
		target, err := os.Readlink(filepath.Join(r.Dir, next))
		if err != nil {
			return "", err
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		rest := path.Join(append([]string{target}, parts[i+1:]...)...)
		return r.follow(path.Clean(rest), depth+1)
	}
	host := filepath.Join(r.Dir, cur)
	if host != r.Dir && !strings.HasPrefix(host, r.Dir+string(filepath.Separator)) {
		return "", fmt.Errorf("%s: %w", clean, ErrOutside)
	}
	return host, nil
}

// SandboxPath turns a host path under the root back into the path the
// sandbox sees.
func (r Root) SandboxPath(host string) string {
	if r.Dir == "/" {
		return host
	}
	rel, err := filepath.Rel(r.Dir, host)
	if err != nil || strings.HasPrefix(rel, "..") {
		return host
	}
	return "/" + filepath.ToSlash(strings.TrimPrefix(rel, "."))
}
