package volnfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs"
	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"golang.org/x/sys/unix"
)

// The owner every export in these tests forces: not root, not the test's.
const testUID, testGID = 4242, 4343

// needRoot: the server chowns everything the guest creates to the
// Export's owner, which only root may do (as the shim is).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (the server chowns what the guest creates, as the shim does): run as root, e.g. go test -exec sudo ./shim/volnfs/")
	}
}

// serve starts a Server for exports on a loopback listener and returns
// its address; cleanup closes it and checks Serve returned nil.
func serve(t *testing.T, exports ...Export) (*Server, string) {
	t.Helper()
	s, err := New(exports)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve after Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return s, l.Addr().String()
}

// mount mounts dirpath as a guest would (MOUNT then NFS on the one port,
// no portmapper), with AUTH_SYS root credentials.
func mount(t *testing.T, addr, dirpath string) (*nfsc.Target, error) {
	t.Helper()
	// go-nfs-client binds a random local port of its own choosing: one
	// still in TIME_WAIT from an earlier connection of the test is
	// refused, and a new pick is the client's way around it.
	c, err := rpc.DialTCP("tcp", addr, false)
	for try := 0; errors.Is(err, syscall.EADDRINUSE) && try < 5; try++ {
		c, err = rpc.DialTCP("tcp", addr, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	m := nfsc.Mount{Client: c}
	return m.Mount(dirpath, rpc.NewAuthUnix("guest", 0, 0).Auth())
}

func mustMount(t *testing.T, addr, dirpath string) *nfsc.Target {
	t.Helper()
	v, err := mount(t, addr, dirpath)
	if err != nil {
		t.Fatalf("mount %s: %v", dirpath, err)
	}
	return v
}

func export(t *testing.T, name string) Export {
	return Export{Name: name, Dir: t.TempDir(), UID: testUID, GID: testGID}
}

func writeFile(t *testing.T, v *nfsc.Target, name string, data []byte) {
	t.Helper()
	f, err := v.OpenFile(name, 0o644)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", name, err)
	}
}

func readFile(v *nfsc.Target, name string) ([]byte, error) {
	f, err := v.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func listDir(t *testing.T, v *nfsc.Target, dir string) []string {
	t.Helper()
	ents, err := v.ReadDirPlus(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var names []string
	for _, e := range ents {
		if e.FileName != "." && e.FileName != ".." {
			names = append(names, e.FileName)
		}
	}
	sort.Strings(names)
	return names
}

func TestNewRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ok := Export{Name: "data", Dir: dir, UID: testUID, GID: testGID}
	with := func(f func(*Export)) Export { e := ok; f(&e); return e }
	cases := map[string][]Export{
		"empty name":    {with(func(e *Export) { e.Name = "" })},
		"slash in name": {with(func(e *Export) { e.Name = "a/b" })},
		"dot dot":       {with(func(e *Export) { e.Name = ".." })},
		"too long":      {with(func(e *Export) { e.Name = strings.Repeat("a", 64) })},
		"duplicate":     {ok, with(func(e *Export) { e.Dir = t.TempDir() })},
		"root uid":      {with(func(e *Export) { e.UID = 0 })},
		"root gid":      {with(func(e *Export) { e.GID = 0 })},
		"negative uid":  {with(func(e *Export) { e.UID = -1 })},
		"missing dir":   {with(func(e *Export) { e.Dir = filepath.Join(dir, "nope") })},
		"dir is a file": {with(func(e *Export) { e.Dir = file })},
	}
	for name, exports := range cases {
		if s, err := New(exports); err == nil {
			s.Close()
			t.Errorf("%s: New accepted %+v", name, exports)
		}
	}
	s, err := New([]Export{ok, with(func(e *Export) { e.Name = "Other_1-x"; e.Dir = t.TempDir() })})
	if err != nil {
		t.Fatalf("New refused good exports: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReadWriteListRenameRemove is a guest's everyday use of a volume.
func TestReadWriteListRenameRemove(t *testing.T) {
	needRoot(t)
	e := export(t, "data")
	_, addr := serve(t, e)
	v := mustMount(t, addr, "/data")

	data := bytes.Repeat([]byte("sandlot volume\n"), 10000) // several WRITEs' worth
	writeFile(t, v, "a.txt", data)
	if got, err := readFile(v, "a.txt"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back a.txt: %d bytes, %v; want %d bytes", len(got), err, len(data))
	}
	if got, err := os.ReadFile(filepath.Join(e.Dir, "a.txt")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a.txt on the host: %d bytes, %v", len(got), err)
	}
	if err := v.Setattr("a.txt", nfsc.Sattr3{Size: nfsc.SetSize{SetIt: true, Size: 15}}); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if got, err := readFile(v, "a.txt"); err != nil || string(got) != "sandlot volume\n" {
		t.Fatalf("after truncate to 15: %q, %v", got, err)
	}
	if _, err := v.Mkdir("d", 0o755); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	if got := listDir(t, v, "/"); fmt.Sprint(got) != "[a.txt d]" {
		t.Fatalf("listing %v, want [a.txt d]", got)
	}
	if err := v.Rename("a.txt", "d/b.txt"); err != nil {
		t.Fatalf("rename: %v", err)
	}
	if got := listDir(t, v, "d"); fmt.Sprint(got) != "[b.txt]" {
		t.Fatalf("d lists %v after rename", got)
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "d", "b.txt")); err != nil {
		t.Fatalf("renamed file on the host: %v", err)
	}
	if err := v.Remove("d/b.txt"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if err := v.RmDir("d"); err != nil {
		t.Fatalf("rmdir: %v", err)
	}
	if ents, err := os.ReadDir(e.Dir); err != nil || len(ents) != 0 {
		t.Fatalf("export not empty after removes: %v, %v", ents, err)
	}
}

// TestMountOnlyExactExport: MOUNT gives an export for exactly "/<Name>"
// or "<Name>", and refuses any other path, a subdirectory included.
func TestMountOnlyExactExport(t *testing.T) {
	e := export(t, "data")
	if err := os.Mkdir(filepath.Join(e.Dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, addr := serve(t, e, export(t, "other"))
	// go-nfs cannot even decode an empty path: refused all the same.
	if _, err := mount(t, addr, ""); err == nil {
		t.Error(`mount "" succeeded`)
	}
	for _, p := range []string{"/nope", "/", "/data/sub", "/data/", "//data", "/data/..", "/../data", "/DATA"} {
		if _, err := mount(t, addr, p); err == nil || !strings.Contains(err.Error(), "MNT3ERR_NOENT") {
			t.Errorf("mount %q: %v, want MNT3ERR_NOENT", p, err)
		}
	}
	for _, p := range []string{"/data", "data", "/other"} {
		if _, err := mount(t, addr, p); err != nil {
			t.Errorf("mount %q: %v", p, err)
		}
	}
}

// TestExportsAreSeparate: two exports of one server see only their own
// directories.
func TestExportsAreSeparate(t *testing.T) {
	needRoot(t)
	a, b := export(t, "a"), export(t, "b")
	_, addr := serve(t, a, b)
	va, vb := mustMount(t, addr, "/a"), mustMount(t, addr, "/b")
	writeFile(t, va, "only-a", []byte("a"))
	writeFile(t, vb, "only-b", []byte("b"))
	if got := listDir(t, va, "/"); fmt.Sprint(got) != "[only-a]" {
		t.Errorf("export a lists %v", got)
	}
	if got := listDir(t, vb, "/"); fmt.Sprint(got) != "[only-b]" {
		t.Errorf("export b lists %v", got)
	}
}

// TestOwnerForcedAndSetuidStripped: whatever credentials the guest sends
// (root's here), what it creates belongs to the Export's owner, and it can
// neither set setuid/setgid nor chown to anyone else.
func TestOwnerForcedAndSetuidStripped(t *testing.T) {
	needRoot(t)
	e := export(t, "data")
	_, addr := serve(t, e)
	v := mustMount(t, addr, "/data")
	writeFile(t, v, "f", []byte("#!/bin/sh\n"))
	if _, err := v.Mkdir("d", 0o2775); err != nil {
		t.Fatal(err)
	}
	if err := v.Symlink("f", "l"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"f", "d", "l"} {
		checkOwner(t, filepath.Join(e.Dir, n), testUID, testGID)
	}
	attr, err := v.Getattr("f")
	if err != nil {
		t.Fatal(err)
	}
	if attr.UID != testUID || attr.GID != testGID {
		t.Errorf("GETATTR reports %d:%d, want the real owner %d:%d", attr.UID, attr.GID, testUID, testGID)
	}

	err = v.Setattr("f", nfsc.Sattr3{Mode: nfsc.SetMode{SetIt: true, Mode: 0o6755}})
	if err != nil {
		t.Fatalf("chmod 6755: %v", err)
	}
	fi, err := os.Stat(filepath.Join(e.Dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("after chmod 6755 the file is %v, want -rwxr-xr-x", fi.Mode())
	}

	err = v.Setattr("f", nfsc.Sattr3{UID: nfsc.SetUID{SetIt: true, UID: 0}, GID: nfsc.SetUID{SetIt: true, UID: 0}})
	if err == nil {
		t.Error("chown to root was allowed")
	}
	checkOwner(t, filepath.Join(e.Dir, "f"), testUID, testGID)
}

func checkOwner(t *testing.T, p string, uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != uid || st.Gid != gid {
		t.Errorf("%s is owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
	}
	if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 && !fi.IsDir() {
		t.Errorf("%s is %v: setuid/setgid", p, fi.Mode())
	}
}

// TestCloseDropsGuest: Close ends Serve (serve's cleanup checks it
// returned nil), drops the guest's connections and stops listening;
// Serve after Close is refused.
func TestCloseDropsGuest(t *testing.T) {
	e := export(t, "data")
	s, addr := serve(t, e)
	mustMount(t, addr, "/data")
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.conns) == 2 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("guest connection after Close: read %v, want EOF", err)
	}
	if c, err := net.Dial("tcp4", addr); err == nil {
		c.Close()
		t.Error("still listening after Close")
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(l); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve after Close: %v, want net.ErrClosed", err)
	}
}

// TestConnectionsBounded: past maxConns, the connection idle longest is
// dropped, so a guest cannot pile up connections in the shim.
func TestConnectionsBounded(t *testing.T) {
	s, addr := serve(t, export(t, "data"))
	var conns []net.Conn
	for i := 0; i < maxConns+1; i++ {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		// Accept order decides which is oldest: wait for each.
		waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.conns) == min(i+1, maxConns) })
	}
	conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conns[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("oldest connection: read %v, want EOF (dropped)", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out")
}

// TestFSStat: the guest's df sees the real filesystem under the export,
// not go-nfs's 2^62 defaults.
func TestFSStat(t *testing.T) {
	e := export(t, "data")
	r := newRootFS(t, e)
	var st unix.Statfs_t
	if err := unix.Statfs(e.Dir, &st); err != nil {
		t.Fatal(err)
	}
	var got nfs.FSStat
	if err := (&exportsHandler{}).FSStat(context.Background(), r, &got); err != nil {
		t.Fatal(err)
	}
	if want := st.Blocks * uint64(st.Frsize); got.TotalSize != want || got.TotalFiles != st.Files {
		t.Errorf("FSSTAT total %d bytes %d files, want %d bytes %d files", got.TotalSize, got.TotalFiles, want, st.Files)
	}
}
