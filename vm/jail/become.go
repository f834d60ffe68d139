package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// hostTree is what every VMM needs of the host: its binary, libraries and
// firmware (/usr) and the merged-/usr links; device nodes it may open.
var (
	hostTree = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache"}
	devices  = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}
)

// become runs in the helper: it joins the cgroups, builds the jail's root,
// drops every privilege and executes the VMM. It returns only on failure.
func become(s Spec) error {
	// Bounding-set drops, no_new_privs and the exec are per thread: all
	// on this one.
	runtime.LockOSThread()
	if s.OOMScoreAdj != nil { // before the drop: lowering it needs CAP_SYS_RESOURCE
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(*s.OOMScoreAdj)), 0); err != nil {
			return fmt.Errorf("oom_score_adj: %w", err)
		}
	}
	for _, cg := range s.Cgroups {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", cg, err)
		}
	}
	lastCap, err := lastCapability()
	if err != nil {
		return err
	}
	if err := buildRoot(s); err != nil {
		return err
	}
	if err := pivot(s.Root); err != nil {
		return err
	}
	if err := dropPrivileges(s, lastCap); err != nil {
		return err
	}
	env := s.Env
	if env == nil {
		env = []string{}
	}
	return fmt.Errorf("exec %s: %w", s.Path, syscall.Exec(s.Path, append([]string{s.Path}, s.Args...), env))
}

// buildRoot mounts a tmpfs on s.Root and binds into it the host tree
// (unless s.OwnTree), the device nodes and s.Binds, each at its own path. Mount events stay in
// this namespace: the root is made private first.
func buildRoot(s Spec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", s.Root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("jail root tmpfs: %w", err)
	}
	for _, p := range hostTree {
		if s.OwnTree {
			break
		}
		if err := mirror(s.Root, p); err != nil {
			return err
		}
	}
	for _, d := range append(devices, s.Devices...) {
		if err := bind(s.Root, d, true, true); err != nil {
			return err
		}
	}
	for _, b := range s.Binds {
		if err := bind(s.Root, b.Path, b.Writable, false); err != nil {
			return err
		}
	}
	return nil
}

// mirror recreates a host path of the host tree in the jail: a symlink as
// the same symlink (merged /usr), anything else as a read-only bind; a
// path the host lacks is skipped.
func mirror(root, p string) error {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		return os.Symlink(target, filepath.Join(root, p))
	}
	return bind(root, p, false, false)
}

// bind mounts host path p at the same path under root. Device nodes keep
// dev; everything else is nosuid,nodev, and read-only unless writable.
func bind(root, p string, writable, device bool) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	target := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if err := mountPoint(target, fi.IsDir()); err != nil {
		return err
	}
	if err := unix.Mount(p, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("jail: bind %s: %w", p, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID)
	if !device {
		flags |= unix.MS_NODEV
	}
	if !writable {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("jail: remount %s: %w", p, err)
	}
	return nil
}

// mountPoint makes an empty file or directory to mount on, unless one is
// there already (a path inside an earlier, read-only bind).
func mountPoint(target string, dir bool) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	var err error
	if dir {
		err = os.Mkdir(target, 0o755)
	} else {
		err = os.WriteFile(target, nil, 0o644)
	}
	if err != nil {
		return fmt.Errorf("jail: mount point %s: %w", target, err)
	}
	return nil
}

// pivot makes root the namespace's root, drops the host's tree from it
// and makes the root itself read-only.
func pivot(root string) error {
	old := filepath.Join(root, ".host")
	if err := os.Mkdir(old, 0o700); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("jail: pivot_root %s: %w", root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("jail: chdir: %w", err)
	}
	if err := unix.Unmount("/.host", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("jail: detach the host tree: %w", err)
	}
	if err := os.Remove("/.host"); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("", "/", "", flags, ""); err != nil {
		return fmt.Errorf("jail: read-only root: %w", err)
	}
	return nil
}

// dropPrivileges empties the bounding set, sets no_new_privs and takes
// the VMM's credentials (which clears the permitted and effective sets:
// no SECBIT_KEEP_CAPS). The credential change clears the parent-death
// signal, so it is set again.
func dropPrivileges(s Spec, lastCap int) error {
	for c := 0; c <= lastCap; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("jail: drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("jail: no_new_privs: %w", err)
	}
	if err := syscall.Setgroups(s.Groups); err != nil {
		return fmt.Errorf("jail: setgroups: %w", err)
	}
	if err := syscall.Setresgid(s.GID, s.GID, s.GID); err != nil {
		return fmt.Errorf("jail: setresgid %d: %w", s.GID, err)
	}
	if err := syscall.Setresuid(s.UID, s.UID, s.UID); err != nil {
		return fmt.Errorf("jail: setresuid %d: %w", s.UID, err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("jail: parent-death signal: %w", err)
	}
	return nil
}

func lastCapability() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("jail: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("jail: cap_last_cap %q: %w", b, err)
	}
	return n, nil
}
