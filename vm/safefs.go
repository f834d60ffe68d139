package vm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// No path the VMM can write is followed as root. A jailed QEMU owns its
// run directory, its disk directory and a booted VM's RAM directory: a
// guest that escapes into QEMU can put anything there — a symlink to
// /etc/shadow where the disk layer was, a hard link to another file, a
// FIFO. Root (the shim, this package inside it) still reads, copies,
// creates, renames and removes files there, so it does each through a Dir:
// the directory opened once, every name resolved beneath it by openat2
// (no symlink, no magic link, no "..", no mount crossing), and the file
// then handled by its fd, never by its path again.

// ErrRefused is what every refusal of a Dir wraps (errors.Is).
var ErrRefused = errors.New("refused: a file root must not follow")

// RefusedError is a file a Dir will not open, change or read: a symlink,
// a hard link, not a regular file, or someone else's.
type RefusedError struct {
	Path string
	What string // "symlink", "hard link", "named pipe", ...
	Why  string // more, or ""
}

func (e *RefusedError) Error() string {
	msg := "refusing " + e.What + " at " + e.Path
	if e.Why != "" {
		msg += ": " + e.Why
	}
	return msg
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

func refused(path, what, why string) error { return &RefusedError{Path: path, What: what, Why: why} }

// resolveBeneath is how every name in a Dir is resolved.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Dir is a directory whose entries a hostile process may have written.
type Dir struct {
	path string
	fd   int    // O_PATH|O_DIRECTORY
	uid  uint32 // the directory's owner (the VM's uid once handed over)
}

// OpenDir opens path, which must be a directory and not a symlink (its
// parents are root's: only the entries inside are not trusted).
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		var st unix.Stat_t
		if errors.Is(err, unix.ENOTDIR) && unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, refused(path, "symlink", "a directory was expected")
		}
		return nil, &os.PathError{Op: "open directory", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat directory", Path: path, Err: err}
	}
	return &Dir{path: path, fd: fd, uid: st.Uid}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Path is the directory's path, for messages.
func (d *Dir) Path() string { return d.path }

// Join is name's path, for messages.
func (d *Dir) Join(name string) string { return filepath.Join(d.path, name) }

// open resolves name beneath d with openat2 and opens it with flags.
func (d *Dir) open(name string, flags uint64, mode uint32) (int, error) {
	if name == "" || filepath.IsAbs(name) {
		return -1, fmt.Errorf("open %q in %s: want a relative name", name, d.path)
	}
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY // openat2 takes O_PATH with no other open flags
	}
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: uint64(mode), Resolve: resolveBeneath}
	var err error
	for range 10 {
		var fd int
		fd, err = unix.Openat2(d.fd, name, &how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue // a signal, or a rename in the directory raced the lookup
		}
		if err != nil {
			break
		}
		return fd, nil
	}
	return -1, d.openErr(name, err)
}

func (d *Dir) openErr(name string, err error) error {
	p := d.Join(name)
	switch {
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("open %s: the kernel has no openat2 (Linux 5.6 or later is needed to open files a VM can write without following its links): %w", p, err)
	case errors.Is(err, unix.ELOOP):
		return refused(p, "symlink", "")
	case errors.Is(err, unix.EXDEV):
		return refused(p, "path", fmt.Sprintf("%q leaves %s or crosses a mount", name, d.path))
	case errors.Is(err, unix.EEXIST) && d.isSymlink(name):
		return refused(p, "symlink", "")
	}
	return &os.PathError{Op: "open", Path: p, Err: err}
}

func (d *Dir) isSymlink(name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// checkFile refuses, for the file open at fd, anything but a regular file
// with one link (a second link may be a file of root's the VM linked in);
// with owned, a file its directory's owner does not own too (what QEMU
// writes is its uid's: a link to anyone else's file is refused even if
// the link count raced).
func (d *Dir) checkFile(fd int, name string, owned bool) error {
	p := d.Join(name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refused(p, fileKindOf(st.Mode), "a regular file was expected")
	}
	if st.Nlink != 1 {
		return refused(p, "hard link", fmt.Sprintf("the file has %d links", st.Nlink))
	}
	if owned && st.Uid != d.uid {
		return refused(p, fmt.Sprintf("file of uid %d", st.Uid), fmt.Sprintf("%s is uid %d's", d.path, d.uid))
	}
	return nil
}

func fileKindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "named pipe"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "regular file"
}

// Open opens name for reading: a regular file with one link. O_NONBLOCK
// keeps a FIFO planted there from blocking the open.
func (d *Dir) Open(name string) (*os.File, error) { return d.openRead(name, false) }

// OpenOwned is Open of a file the directory's owner owns too: what QEMU
// wrote there (its device state) or was given (its layer, its RAM).
func (d *Dir) OpenOwned(name string) (*os.File, error) { return d.openRead(name, true) }

func (d *Dir) openRead(name string, owned bool) (*os.File, error) {
	fd, err := d.open(name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := d.checkFile(fd, name, owned); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: d.Join(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.Join(name)), nil
}

// Create creates name, which must not exist (not even as a symlink),
// read-write with perm.
func (d *Dir) Create(name string, perm os.FileMode) (*os.File, error) {
	fd, err := d.open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, uint32(perm.Perm()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), d.Join(name)), nil
}

// Replace removes whatever name is (the entry itself, never what a link
// points to) and creates a new file there, as Create.
func (d *Dir) Replace(name string, perm os.FileMode) (*os.File, error) {
	var err error
	for range 3 { // something re-creating name in between: try again, then give up
		if rmErr := d.Remove(name); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			return nil, rmErr
		}
		var f *os.File
		if f, err = d.Create(name, perm); err == nil || !errors.Is(err, os.ErrExist) && !errors.Is(err, ErrRefused) {
			return f, err
		}
	}
	return nil, fmt.Errorf("replace %s: it keeps being re-created: %w", d.Join(name), err)
}

// Stat describes name itself (a symlink is refused, not followed).
func (d *Dir) Stat(name string) (os.FileInfo, error) {
	fd, err := d.open(name, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), d.Join(name))
	defer f.Close()
	return f.Stat()
}

// entry checks name is one entry of d (unlinkat and renameat resolve the
// parents of a longer path, following what is there).
func (d *Dir) entry(op, name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("%s %q in %s: want the name of an entry", op, name, d.path)
	}
	return nil
}

// Remove removes the entry name (a file, a symlink, an empty directory).
func (d *Dir) Remove(name string) error {
	if err := d.entry("remove", name); err != nil {
		return err
	}
	err := unix.Unlinkat(d.fd, name, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &os.PathError{Op: "remove", Path: d.Join(name), Err: err}
	}
	return nil
}

// Rename renames the entry from to to, both in d (neither is followed).
func (d *Dir) Rename(from, to string) error {
	if err := errors.Join(d.entry("rename", from), d.entry("rename", to)); err != nil {
		return err
	}
	if err := unix.Renameat(d.fd, from, d.fd, to); err != nil {
		return &os.LinkError{Op: "rename", Old: d.Join(from), New: d.Join(to), Err: err}
	}
	return nil
}

// openPath opens name as an O_PATH fd for a change of its inode: a
// directory, or a regular file with one link ("." is d itself).
func (d *Dir) openPath(name string) (int, error) {
	fd, err := d.open(name, unix.O_PATH, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "stat", Path: d.Join(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := d.checkFile(fd, name, false); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// Chown changes the owner of name ("." is the directory) by its fd.
func (d *Dir) Chown(name string, uid, gid int) error {
	fd, err := d.openPath(name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
		return &os.PathError{Op: "chown", Path: d.Join(name), Err: err}
	}
	if name == "." {
		d.uid = uint32(uid)
	}
	return nil
}

// Chmod changes the mode of name ("." is the directory) through its fd
// (/proc/self/fd/N names exactly the inode opened).
func (d *Dir) Chmod(name string, mode os.FileMode) error {
	fd, err := d.openPath(name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), uint32(mode.Perm())); err != nil {
		return &os.PathError{Op: "chmod", Path: d.Join(name), Err: err}
	}
	return nil
}

// Dial connects to the unix socket name. connect(2) would follow a
// symlink there to any socket of the host (containerd's): the socket is
// opened beneath d first and connected to through its fd.
func (d *Dir) Dial(ctx context.Context, name string) (*net.UnixConn, error) {
	fd, err := d.open(name, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: d.Join(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, refused(d.Join(name), fileKindOf(st.Mode), "a socket was expected")
	}
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", d.Join(name), err)
	}
	return c.(*net.UnixConn), nil
}

// dialSocket dials the unix socket at path (a VM's QMP or control
// socket), waiting while QEMU has not made it yet or does not listen yet.
func dialSocket(ctx context.Context, path string) (*net.UnixConn, error) {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	delay := time.Millisecond
	for {
		c, err := d.Dial(ctx, filepath.Base(path))
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial %s: %w (last error: %v)", path, context.Cause(ctx), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 20*time.Millisecond)
	}
}
