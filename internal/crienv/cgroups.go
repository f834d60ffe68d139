package crienv

// Cgroups: removing a pod cgroup parent from every hierarchy, killing what
// is left in it (RemoveCgroup), and creating one (MakeCgroup).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// removeCgroups removes CgroupParent in every hierarchy. runc removes the
// containers' cgroups but, like kubelet's pod cgroups, never their parent.
func (e *Env) removeCgroups() error { return RemoveCgroup(e.CgroupParent) }

// RemoveCgroup removes cgroup path (e.g. "/mypods") and everything under
// it from every hierarchy, deepest first.
func RemoveCgroup(path string) error {
	if path == "" || path == "/" {
		return nil // a half-initialized caller: never walk a hierarchy's root
	}
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	var errs []error
	for _, root := range roots {
		errs = append(errs, rmdirTree(filepath.Join(root, path)))
	}
	return errors.Join(errs...)
}

func cgroupRoots() ([]string, error) {
	mounts, err := mountsUnder("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			roots = append(roots, m.Point)
		}
	}
	return roots, nil
}

// rmdirTree removes a cgroup directory tree deepest first (cgroupfs only
// allows rmdir of directories without child cgroups).
func rmdirTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := rmdirCgroup(dirs[i]); err != nil {
			return fmt.Errorf("rmdir %s: %w", dirs[i], err)
		}
	}
	return nil
}

// rmdirCgroup removes one cgroup, retrying while it is busy: a process
// left in it (a container whose runtime died before it) is killed, and a
// cgroup whose last process just exited is released by the kernel a
// moment later.
func rmdirCgroup(dir string) error {
	return poll.Within(15*time.Second, "rmdir "+dir, func() error {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			return nil
		case !errors.Is(err, unix.EBUSY):
			return poll.Stop(fmt.Errorf("%w (processes in it: %v)", err, killCgroupProcs(dir)))
		}
		return fmt.Errorf("%w (processes in it: %v)", err, killCgroupProcs(dir))
	})
}

// killCgroupProcs SIGKILLs the processes in a cgroup and returns them.
func killCgroupProcs(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			pids = append(pids, pid)
		}
	}
	return pids
}

// MakeCgroup creates cgroup path in every hierarchy (a kubelet's
// cgroupRoot must exist). A v1 cpuset child starts with no CPUs or memory
// nodes: it gets its parent's.
func MakeCgroup(path string) error {
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	for _, root := range roots {
		dir := filepath.Join(root, path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				continue // not a cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %s: %w", dir, f, err)
			}
		}
	}
	return nil
}
