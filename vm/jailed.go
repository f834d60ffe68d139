package vm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/vm/jail"
)

// Jail confines a VM's QEMU (vm/jail): its own uid and gid, no
// capabilities, a mount namespace holding only this VM's files, the given
// cgroups and OOM score.
type Jail struct {
	UID, GID int
	// SharedGID is a group every jailed QEMU is in: shared read-only
	// inputs (base disks, a restore's base memory) are made readable by
	// it. The mount namespace, not the group, keeps one VM from another's
	// inputs: only its own are bound into its root.
	SharedGID   int
	Cgroups     []string
	OOMScoreAdj *int
}

// jailRoot is the empty directory a jailed QEMU's root is mounted on.
func (v *VM) jailRoot() string { return v.cfg.RunDir + ".jail" }

// command is the QEMU process for args, jailed when the config says so;
// files reach QEMU as fds 3, 4, ...
func (v *VM) command(args []string) (*exec.Cmd, error) {
	if v.cfg.Jail == nil {
		cmd := exec.Command(v.QEMU, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd, nil
	}
	j := v.cfg.Jail
	path, err := exec.LookPath(v.QEMU)
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", v.QEMU, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, err
	}
	binds, devices, err := v.jailFiles()
	if err != nil {
		return nil, err
	}
	root, bundled := BundleRoot(path)
	var env []string
	if bundled { // the jail holds it instead of the host's tree
		binds = append(binds, jail.Bind{Path: root})
		// Its RPATH ($ORIGIN/../lib) needs /proc/self/exe, which the jail
		// has not: the loader is told where the libraries are.
		env = []string{"LD_LIBRARY_PATH=" + filepath.Join(root, "lib")}
	}
	if err := os.Mkdir(v.jailRoot(), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("jail root: %w", err)
	}
	groups := []int{j.SharedGID}
	if v.spec.Accel == AccelKVM {
		if gid, err := ownerGroup("/dev/kvm"); err == nil {
			groups = append(groups, gid)
		}
	}
	return jail.Command(jail.Spec{Path: path, Args: args, Env: env, UID: j.UID, GID: j.GID, Groups: groups,
		Root: v.jailRoot(), Binds: binds, OwnTree: bundled, Devices: devices, Cgroups: j.Cgroups, OOMScoreAdj: j.OOMScoreAdj})
}

// jailFiles hands the VM's files to its uid and lists what its root
// holds: its run and disk directories and RAM (writable), its kernel,
// initramfs and base disk (read-only), a restore's base memory, /dev/kvm.
func (v *VM) jailFiles() ([]jail.Bind, []string, error) {
	j := v.cfg.Jail
	// The VM's own: its directories (".") and the files made in them.
	own := map[string][]string{v.cfg.RunDir: {"."}, v.diskDir(): {".", filepath.Base(v.spec.Layer)}}
	binds := []jail.Bind{{Path: v.cfg.RunDir, Writable: true}}
	if v.diskDir() != v.cfg.RunDir {
		binds = append(binds, jail.Bind{Path: v.diskDir(), Writable: true})
	}
	if v.spec.SharedMemory {
		own[filepath.Dir(v.spec.MemoryPath)] = []string{".", filepath.Base(v.spec.MemoryPath)}
		binds = append(binds, jail.Bind{Path: filepath.Dir(v.spec.MemoryPath), Writable: true})
	} else {
		// QEMU 7.2 opens even a private (share=off) memory file read-write
		// (its readonly=on maps the guest's RAM read-only): the base must
		// be openable so by the VMM group. See docs/security.md.
		if err := shareWithVMMs(v.spec.MemoryPath, j.SharedGID, true); err != nil {
			return nil, nil, err
		}
		binds = append(binds, jail.Bind{Path: v.spec.MemoryPath, Writable: true})
	}
	for _, p := range []string{v.spec.Kernel, v.spec.Initrd, v.spec.BaseDisk} {
		if p == "" {
			continue
		}
		if err := shareWithVMMs(p, j.SharedGID, false); err != nil {
			return nil, nil, err
		}
		binds = append(binds, jail.Bind{Path: p})
	}
	for dir, names := range own {
		if err := handOver(dir, j.UID, j.GID, names...); err != nil {
			return nil, nil, err
		}
	}
	var devices []string
	if v.spec.Accel == AccelKVM {
		devices = append(devices, "/dev/kvm")
	}
	return binds, devices, nil
}

// handOver gives names in dir ("." is dir itself) to the VM's uid, by
// fd beneath dir: a symlink or a file with a second link found there is
// refused, not followed. It runs before QEMU starts (a restore in place
// gets new directories: Stop removed the old VM's), so nothing hostile is
// expected there; it is checked all the same.
func handOver(dir string, uid, gid int, names ...string) error {
	d, err := OpenDir(dir)
	if err != nil {
		return fmt.Errorf("hand %s to the VM's uid: %w", dir, err)
	}
	defer d.Close()
	for _, n := range names {
		if err := d.Chown(n, uid, gid); err != nil {
			return fmt.Errorf("hand %s to the VM's uid: %w", d.Join(n), err)
		}
	}
	return nil
}

// shareWithVMMs gives group gid read (and, if writable, write) access to
// p, keeping its owner's bits; "other" gets nothing more.
func shareWithVMMs(p string, gid int, writable bool) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	mode := fi.Mode().Perm() | 0o040
	if writable {
		mode |= 0o020
	}
	if err := os.Chown(p, -1, gid); err != nil {
		return fmt.Errorf("share %s with the VMM group: %w", p, err)
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("share %s with the VMM group: %w", p, err)
	}
	return nil
}

func ownerGroup(p string) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return 0, err
	}
	return int(st.Gid), nil
}
