package shim

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The VM's cgroup is the pod sandbox container's cgroupsPath (inside the
// pod's cgroup, which carries the pod's limits and RuntimeClass overhead):
// the shim makes it, as runc would for a pause container, and QEMU joins
// it before it runs.

// cgroupDirs is the VM cgroup in every hierarchy the node mounts.
func cgroupDirs(cgroupsPath string) ([]string, error) {
	rel, err := cgroupRelPath(cgroupsPath)
	if err != nil || rel == "" {
		return nil, err
	}
	roots, err := cgroupRoots()
	if err != nil {
		return nil, err
	}
	if len(roots) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	dirs := make([]string, 0, len(roots))
	for _, root := range roots {
		dirs = append(dirs, filepath.Join(root, rel))
	}
	return dirs, nil
}

// cgroupRelPath turns an OCI cgroupsPath into a path below a hierarchy's
// root: cgroupfs paths as they are, systemd's "slice:prefix:name" as the
// nested slices systemd makes of it.
func cgroupRelPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if strings.HasPrefix(p, "/") {
		if filepath.Clean(p) != p || strings.Contains(p, "..") {
			return "", fmt.Errorf("cgroupsPath %q is not clean", p)
		}
		return p, nil
	}
	parts := strings.Split(p, ":")
	if len(parts) != 3 || !strings.HasSuffix(parts[0], ".slice") || strings.ContainsAny(p, "/") {
		return "", fmt.Errorf("cgroupsPath %q: want /a/b or slice:prefix:name", p)
	}
	var dirs []string
	words := strings.Split(strings.TrimSuffix(parts[0], ".slice"), "-")
	for i := range words {
		dirs = append(dirs, strings.Join(words[:i+1], "-")+".slice")
	}
	return "/" + filepath.Join(append(dirs, parts[1]+"-"+parts[2]+".scope")...), nil
}

func cgroupRoots() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var roots []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options... - fstype source
		left, right, ok := strings.Cut(sc.Text(), " - ")
		fields, fs := strings.Fields(left), strings.Fields(right)
		if ok && len(fields) >= 5 && len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") {
			roots = append(roots, fields[4])
		}
	}
	return roots, sc.Err()
}

// makeCgroups creates the directories and any parent missing (as runc
// does); a v1 cpuset child starts with no CPUs or memory nodes, so each
// new level gets its parent's.
func makeCgroups(dirs []string) error {
	for _, dir := range dirs {
		if err := makeCgroup(dir); err != nil {
			return err
		}
	}
	return nil
}

func makeCgroup(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := makeCgroup(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
		if err != nil {
			continue // not a v1 cpuset hierarchy
		}
		if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
			return fmt.Errorf("cgroup %s: %s: %w", dir, f, err)
		}
	}
	return nil
}

// removeCgroups removes them once QEMU is gone; the kernel releases a
// cgroup a moment after its last process exits, hence the short retry.
func removeCgroups(dirs []string) error {
	var errs []error
	for _, dir := range dirs {
		deadline := time.Now().Add(2 * time.Second)
		for {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// oomKilled reports whether the memory cgroup among dirs saw an OOM kill
// (v1 memory.oom_control, v2 memory.events).
func oomKilled(dirs []string) bool {
	for _, dir := range dirs {
		for _, f := range []string{"memory.oom_control", "memory.events"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, _ := strings.Cut(line, " "); k == "oom_kill" && v != "0" {
					return true
				}
			}
		}
	}
	return false
}
