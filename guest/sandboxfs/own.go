package sandboxfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Chown gives host to u when the agent may (it runs as root) and must (u
// is not root), so a user's files are its own as if it made them.
func Chown(host string, u User) error {
	if u.UID == 0 || os.Geteuid() != 0 {
		return nil
	}
	if err := os.Lchown(host, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("chown to %s: %w", u.Name, err)
	}
	return nil
}

// MkdirAll creates dir and its missing parents, each owned by u.
func MkdirAll(dir string, u User) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAll(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // raced with another creator: the goal is met
		}
		return err
	}
	return Chown(dir, u)
}

// BareError strips the host path os errors carry, so replies never show
// where the sandbox's root lives on the host.
func BareError(err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
}
