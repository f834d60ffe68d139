package volnfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"golang.org/x/sys/unix"
)

const secret = "host secret\n"

// escapeFixture makes parent/{outside.txt,outdir/,vol/} and plants in vol
// the symlinks a hostile guest (or anyone) could leave there: absolute
// ones to the host's /etc and to outside.txt, and relative ones climbing
// out. It returns the export (vol) and the outside file.
func escapeFixture(t *testing.T) (Export, string) {
	t.Helper()
	parent := t.TempDir()
	outside := filepath.Join(parent, "outside.txt")
	if err := os.WriteFile(outside, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(parent, "outdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(parent, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"etc":     "/etc",
		"passwd":  "/etc/passwd",
		"abs":     outside,
		"up":      "../../",
		"upfile":  "../outside.txt",
		"updir":   "../outdir",
		"deep":    "sub/../../outside.txt",
		"newfile": "../outdir/new.txt", // dangling: a create through it must not land outside
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(vol, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Export{Name: "vol", Dir: vol, UID: testUID, GID: testGID}, outside
}

func newRootFS(t *testing.T, e Export) *rootFS {
	t.Helper()
	r, err := openExport(e, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.root.Close() })
	return r
}

// TestRootFSConfined drives the billy.Filesystem go-nfs uses with the
// names a guest could send: nothing reads, writes, lists or changes
// anything outside the export, through symlinks or "..".
func TestRootFSConfined(t *testing.T) {
	e, outside := escapeFixture(t)
	r := newRootFS(t, e)
	for _, n := range []string{"etc/passwd", "passwd", "abs", "upfile", "deep", "up/outside.txt", "updir/../outside.txt"} {
		if f, err := r.Open(n); err == nil {
			f.Close()
			t.Errorf("open %q succeeded", n)
		}
		if _, err := r.Stat(n); err == nil {
			t.Errorf("stat %q succeeded", n)
		}
	}
	for _, n := range []string{"etc", "up", "updir"} {
		if _, err := r.ReadDir(n); err == nil {
			t.Errorf("readdir %q succeeded", n)
		}
	}
	// ".." is resolved against the export's root, never above it.
	for _, n := range []string{"../outside.txt", "/../outside.txt", "sub/../../outside.txt"} {
		if f, err := r.Open(n); err == nil {
			f.Close()
			t.Errorf("open %q succeeded", n)
		}
	}
	for _, n := range []string{"upfile", "abs", "newfile", "updir/new.txt", "up/new.txt"} {
		if f, err := r.OpenFile(n, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); err == nil {
			f.Close()
			t.Errorf("create %q succeeded", n)
		}
	}
	if err := r.MkdirAll("updir/x", 0o755); err == nil {
		t.Error("mkdir through updir succeeded")
	}
	if err := r.Chmod("upfile", 0o777); err == nil {
		t.Error("chmod through upfile succeeded")
	}
	if err := r.Rename("sub", "updir/sub"); err == nil {
		t.Error("rename into updir succeeded")
	}
	checkOutsideUntouched(t, outside)
}

func checkOutsideUntouched(t *testing.T, outside string) {
	t.Helper()
	if got, err := os.ReadFile(outside); err != nil || string(got) != secret {
		t.Errorf("outside file now %q, %v", got, err)
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("outside file's mode changed: %v, %v", fi.Mode(), err)
	}
	ents, err := os.ReadDir(filepath.Join(filepath.Dir(outside), "outdir"))
	if err != nil || len(ents) != 0 {
		t.Errorf("something was made outside the export: %v, %v", ents, err)
	}
}

// TestSymlinkEscapeOverNFS: the same through the NFS server, with links
// the host left and ones the guest plants itself.
func TestSymlinkEscapeOverNFS(t *testing.T) {
	needRoot(t)
	e, outside := escapeFixture(t)
	_, addr := serve(t, e)
	v := mustMount(t, addr, "/vol")
	if err := v.Symlink("/etc/shadow", "planted"); err != nil {
		t.Fatalf("plant a symlink: %v", err)
	}
	if err := v.Symlink("../../../../outside.txt", "sub/planted-up"); err != nil {
		t.Fatalf("plant a symlink: %v", err)
	}
	if got, err := os.Readlink(filepath.Join(e.Dir, "planted")); err != nil || got != "/etc/shadow" {
		t.Fatalf("planted link on the host: %q, %v", got, err)
	}
	for _, n := range []string{"etc/passwd", "passwd", "abs", "upfile", "deep", "up/outside.txt", "planted", "sub/planted-up", "../outside.txt"} {
		got, err := readFile(v, n)
		if err == nil || bytes.Contains(got, []byte("host secret")) || bytes.Contains(got, []byte("root:")) {
			t.Errorf("read %q: %q, %v", n, got, err)
		}
	}
	for _, n := range []string{"upfile", "planted", "sub/planted-up"} {
		if f, err := v.OpenFile(n, 0o644); err == nil {
			if _, err := f.Write([]byte("pwned")); err == nil {
				t.Errorf("write through %q succeeded", n)
			}
			f.Close()
		}
	}
	if _, err := v.Mkdir("updir/x", 0o755); err == nil {
		t.Error("mkdir through updir succeeded")
	}
	// Not 0777: go-nfs skips a chmod to the mode it lstats (a link's).
	if err := v.Setattr("upfile", nfsc.Sattr3{Mode: nfsc.SetMode{SetIt: true, Mode: 0o600}}); err == nil {
		t.Error("chmod through upfile succeeded")
	}
	checkOutsideUntouched(t, outside)
}

// TestDeviceNotOpened: a device node in the directory (only the host can
// put one there) is never opened for the guest.
func TestDeviceNotOpened(t *testing.T) {
	needRoot(t)
	e := export(t, "data")
	if err := os.Symlink("/dev/zero", filepath.Join(e.Dir, "abs-dev")); err != nil {
		t.Fatal(err)
	}
	if err := mknodNull(filepath.Join(e.Dir, "null")); err != nil {
		t.Skipf("cannot make a device node here: %v", err)
	}
	r := newRootFS(t, e)
	for _, n := range []string{"null", "abs-dev"} {
		if f, err := r.Open(n); err == nil {
			f.Close()
			t.Errorf("open %q succeeded", n)
		}
	}
}

func mknodNull(p string) error {
	return unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
}
