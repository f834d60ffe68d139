package volnfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	"golang.org/x/sys/unix"
)

// rootFS is one export as go-nfs sees it: a billy.Filesystem and
// billy.Change whose every access goes through the export's *os.Root, so
// nothing outside the directory is ever reached, whatever names or
// symlinks the guest uses.
type rootFS struct {
	// name is the export's; besides errors it keeps two exports' rootFS
	// values distinct for go-nfs's handle cache, which compares
	// filesystems with reflect.DeepEqual.
	name     string
	root     *os.Root
	uid, gid int
}

var (
	_ billy.Filesystem = (*rootFS)(nil)
	_ billy.Change     = (*rootFS)(nil)
	_ billy.Capable    = (*rootFS)(nil)
)

// rel turns a go-nfs path (components joined with "/", "" or "/" for the
// export's root) into a name relative to the root. Cleaning it against
// "/" drops any ".." that would climb above the root before os.Root sees
// it; os.Root still refuses whatever symlinks would make escape.
func rel(name string) string {
	n := strings.TrimPrefix(path.Clean("/"+name), "/")
	if n == "" {
		return "."
	}
	return n
}

// Capabilities leaves out locking: there is no NLM and File.Lock is not
// implemented.
func (r *rootFS) Capabilities() billy.Capability {
	return billy.WriteCapability | billy.ReadCapability |
		billy.ReadAndWriteCapability | billy.SeekCapability | billy.TruncateCapability
}

// Join is path.Join: go-nfs joins handle components with it, and rel
// cleans the result.
func (r *rootFS) Join(elem ...string) string { return path.Join(elem...) }

func (r *rootFS) Create(name string) (billy.File, error) {
	return r.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

func (r *rootFS) Open(name string) (billy.File, error) {
	return r.OpenFile(name, os.O_RDONLY, 0)
}

// OpenFile opens a regular file or directory in the root. A file it
// creates is given the export's owner; perm loses setuid and setgid.
func (r *rootFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	n := rel(name)
	var f *os.File
	var err error
	if flag&os.O_CREATE != 0 {
		f, err = r.create(n, flag, safeMode(perm))
	} else {
		f, err = r.openExisting(n, flag)
	}
	if err != nil {
		return nil, err
	}
	return &rootFile{File: f, name: n}, nil
}

// create makes n with O_EXCL first so that it knows whether the file is
// new (only a new file is chowned, by its descriptor), then falls back to
// opening the existing file unless the caller asked for O_EXCL. O_EXCL
// also refuses a symlink at n, so a create never goes through one.
func (r *rootFS) create(n string, flag int, perm os.FileMode) (*os.File, error) {
	// A few tries: between the failed O_EXCL and the open, the guest may
	// remove the file again.
	for range 3 {
		f, err := r.root.OpenFile(n, flag|os.O_EXCL, perm)
		if err == nil {
			if err := f.Chown(r.uid, r.gid); err != nil {
				f.Close()
				_ = r.root.Remove(n)
				return nil, fmt.Errorf("give %s/%s to %d:%d: %w", r.name, n, r.uid, r.gid, err)
			}
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) || flag&os.O_EXCL != 0 {
			return nil, err
		}
		f, err = r.openExisting(n, flag&^os.O_CREATE)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
		if _, lerr := r.root.Lstat(n); lerr == nil {
			// A dangling symlink: never create through one.
			return nil, err
		}
	}
	return nil, &fs.PathError{Op: "create", Path: n, Err: errors.New("file keeps appearing and vanishing")}
}

// openExisting opens n only if it is a regular file or a directory: a
// device node, FIFO or socket left in the directory by the host is never
// opened (opening one can block or act on a host device). The guest
// cannot make such files itself (no MKNOD), so checking before the open
// is not racy in its favour; the check after it covers the rest.
func (r *rootFS) openExisting(n string, flag int) (*os.File, error) {
	if fi, err := r.root.Stat(n); err == nil && !openable(fi) {
		return nil, &fs.PathError{Op: "open", Path: n, Err: fs.ErrPermission}
	}
	f, err := r.root.OpenFile(n, flag, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !openable(fi) {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: n, Err: fs.ErrPermission}
	}
	return f, nil
}

func openable(fi fs.FileInfo) bool { return fi.Mode().IsRegular() || fi.IsDir() }

// safeMode keeps the permission and sticky bits: setuid and setgid are
// never set by the guest (go-nfs already masks modes to 0777; this holds
// whatever go-nfs does).
func safeMode(m os.FileMode) os.FileMode { return m & (os.ModePerm | os.ModeSticky) }

func (r *rootFS) Stat(name string) (os.FileInfo, error)  { return r.root.Stat(rel(name)) }
func (r *rootFS) Lstat(name string) (os.FileInfo, error) { return r.root.Lstat(rel(name)) }
func (r *rootFS) Rename(from, to string) error           { return r.root.Rename(rel(from), rel(to)) }

// Remove removes a file, symlink or empty directory (go-nfs uses it for
// REMOVE and RMDIR).
func (r *rootFS) Remove(name string) error { return r.root.Remove(rel(name)) }

// TempFile is not used by go-nfs.
func (r *rootFS) TempFile(string, string) (billy.File, error) {
	return nil, billy.ErrNotSupported
}

// ReadDir lists a directory, sorted by name as billy promises (go-nfs's
// READDIR cookies index into the listing). Entries are lstat'ed relative
// to the open directory, not by path.
func (r *rootFS) ReadDir(name string) ([]os.FileInfo, error) {
	d, err := r.root.Open(rel(name))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	infos, err := d.Readdir(-1)
	if err != nil {
		return nil, err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name() < infos[j].Name() })
	return infos, nil
}

// MkdirAll makes each missing directory of name and gives each one it
// made the export's owner (os.Root.MkdirAll does not say which it made).
// Lchown: a directory the guest swaps for a symlink in between is not
// followed.
func (r *rootFS) MkdirAll(name string, perm os.FileMode) error {
	n := rel(name)
	if n == "." {
		return nil
	}
	perm = safeMode(perm)
	parts := strings.Split(n, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		err := r.root.Mkdir(p, perm)
		if errors.Is(err, fs.ErrExist) {
			if fi, serr := r.root.Stat(p); serr == nil && fi.IsDir() {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		if err := r.root.Lchown(p, r.uid, r.gid); err != nil {
			return fmt.Errorf("give %s/%s to %d:%d: %w", r.name, p, r.uid, r.gid, err)
		}
	}
	return nil
}

// Symlink stores target as the guest wrote it: the guest's kernel follows
// it, in the guest; os.Root refuses to follow one that leaves the root.
// Unlike billy's contract it does not create missing parents (go-nfs
// checks the parent exists).
func (r *rootFS) Symlink(target, link string) error {
	n := rel(link)
	if err := r.root.Symlink(target, n); err != nil {
		return err
	}
	if err := r.root.Lchown(n, r.uid, r.gid); err != nil {
		return fmt.Errorf("give %s/%s to %d:%d: %w", r.name, n, r.uid, r.gid, err)
	}
	return nil
}

func (r *rootFS) Readlink(link string) (string, error) { return r.root.Readlink(rel(link)) }

// Chroot is not used by go-nfs; a sub-root would also escape nothing, but
// nothing needs one.
func (r *rootFS) Chroot(string) (billy.Filesystem, error) { return nil, billy.ErrNotSupported }

// Root is the export's root as go-nfs paths name it.
func (r *rootFS) Root() string { return "/" }

// Chmod strips setuid and setgid. os.Root.Chmod follows a final symlink
// (inside the root only); its documented race can at worst chmod the
// link itself, which is inside the root too.
func (r *rootFS) Chmod(name string, mode os.FileMode) error {
	return r.root.Chmod(rel(name), safeMode(mode))
}

// Lchown and Chown only ever give a file to the export's owner: the
// guest is root in its VM, and letting it chown to any uid would let it
// plant files owned by host users (root among them). Anything else is
// EPERM, as under nfsd's all_squash.
func (r *rootFS) Lchown(name string, uid, gid int) error {
	if err := r.ownerAllowed(name, uid, gid); err != nil {
		return err
	}
	return r.root.Lchown(rel(name), uid, gid)
}

func (r *rootFS) Chown(name string, uid, gid int) error {
	if err := r.ownerAllowed(name, uid, gid); err != nil {
		return err
	}
	return r.root.Chown(rel(name), uid, gid)
}

func (r *rootFS) ownerAllowed(name string, uid, gid int) error {
	if uid != r.uid || gid != r.gid {
		return &fs.PathError{Op: "chown", Path: rel(name), Err: fs.ErrPermission}
	}
	return nil
}

// Chtimes follows a final symlink (inside the root only). os.Root has no
// Lchtimes; go-nfs never asks for one.
func (r *rootFS) Chtimes(name string, atime, mtime time.Time) error {
	return r.root.Chtimes(rel(name), atime, mtime)
}

// statfs reports the size and free space of the filesystem holding the
// export, from a descriptor of its root (not a host path).
func (r *rootFS) statfs() (unix.Statfs_t, error) {
	var st unix.Statfs_t
	d, err := r.root.Open(".")
	if err != nil {
		return st, fmt.Errorf("open export %s: %w", r.name, err)
	}
	defer d.Close()
	rc, err := d.SyscallConn()
	if err != nil {
		return st, fmt.Errorf("statfs export %s: %w", r.name, err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstatfs(int(fd), &st) }); err != nil {
		return st, fmt.Errorf("statfs export %s: %w", r.name, err)
	}
	if serr != nil {
		return st, fmt.Errorf("statfs export %s: %w", r.name, serr)
	}
	return st, nil
}

// rootFile is an *os.File opened through the root, named as go-nfs named
// it: go-nfs stats a created file by File.Name().
type rootFile struct {
	*os.File
	name string
}

func (f *rootFile) Name() string { return f.name }

// Lock and Unlock are not supported: there is no NLM (the guest mounts
// with nolock) and go-nfs never calls them.
func (f *rootFile) Lock() error   { return billy.ErrNotSupported }
func (f *rootFile) Unlock() error { return billy.ErrNotSupported }
