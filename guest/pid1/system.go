package pid1

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// system is every side effect Init has; realSystem makes the syscalls,
// tests record them.
type system interface {
	Mkdir(dir string, mode os.FileMode) error
	Mount(source, target, fstype string, flags uintptr, data string) error
	IsMountPoint(dir string) bool
	Console(dev string) error
	LoadModule(path string) error
	WaitDevice(path string, timeout time.Duration) error
	SwitchRoot(newRoot string) error
	LinkUp(name string) error
	Kill(pid int, sig unix.Signal) error
	// Processes lists the user processes other than this one.
	Processes() ([]int, error)
	Sync()
	Unmount(target string, flags int) error
	PowerOff() error
}

type realSystem struct{}

func (realSystem) Mkdir(dir string, mode os.FileMode) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	if err := os.MkdirAll(dir, mode.Perm()); err != nil {
		return err
	}
	return os.Chmod(dir, mode) // exact mode: no umask, sticky kept
}

func (realSystem) Mount(source, target, fstype string, flags uintptr, data string) error {
	return unix.Mount(source, target, fstype, flags, data)
}

// IsMountPoint: dir is on another device than its parent (enough for the
// kernel filesystems this is used for).
func (realSystem) IsMountPoint(dir string) bool {
	var st, pst unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Join(dir, ".."), &pst) != nil {
		return false
	}
	return st.Dev != pst.Dev
}

// Console gives PID 1 stdio on dev when the kernel left it none (an
// initramfs without /dev/console).
func (realSystem) Console(dev string) error {
	if _, err := unix.FcntlInt(1, unix.F_GETFD, 0); err == nil {
		return nil
	}
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil // no console: keep going silently
	}
	for i := 0; i <= 2; i++ {
		if fd != i {
			_ = unix.Dup3(fd, i, 0)
		}
	}
	if fd > 2 {
		unix.Close(fd)
	}
	return nil
}

func (realSystem) LoadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if strings.HasSuffix(path, ext) {
			flags |= unix.MODULE_INIT_COMPRESSED_FILE
		}
	}
	err = unix.FinitModule(int(f.Fd()), "", flags)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

func (realSystem) WaitDevice(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("device did not appear within %s: %w", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SwitchRoot makes newRoot the root as switch_root does: pivot_root is
// not allowed out of an initramfs, so move the mount onto / and chroot.
// The initramfs's files stay (they are a few MiB, shared by clones).
func (realSystem) SwitchRoot(newRoot string) error {
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(newRoot, "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s to /: %w", newRoot, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

func (realSystem) LinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

func (realSystem) Kill(pid int, sig unix.Signal) error { return unix.Kill(pid, sig) }

func (realSystem) Processes() ([]int, error) { return userProcesses("/proc", os.Getpid()) }

func (realSystem) Sync() { unix.Sync() }

func (realSystem) Unmount(target string, flags int) error { return unix.Unmount(target, flags) }

func (realSystem) PowerOff() error { return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF) }

// pfKthread is PF_KTHREAD in /proc/<pid>/stat's flags.
const pfKthread = 0x00200000

// userProcesses lists the pids under procDir that are neither self nor
// kernel threads (zombies count: they are about to be reaped).
func userProcesses(procDir string, self int) ([]int, error) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if flags, ok := statFlags(string(b)); ok && flags&pfKthread == 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// statFlags parses the flags field (the 9th) of a /proc/<pid>/stat line;
// the command name (2nd field) may contain spaces and parentheses.
func statFlags(stat string) (uint64, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(stat[i+1:])
	// After the name: state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8) flags(9).
	if len(f) < 7 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[6], 10, 64)
	return v, err == nil
}
