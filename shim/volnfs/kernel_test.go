package volnfs

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKernelMount mounts an export with the host kernel's NFS client the
// way the guest does: mount(2) type "nfs" with the shim's options, MOUNT
// and NFS on one port, no portmapper and no mount.nfs helper.
func TestKernelMount(t *testing.T) {
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		t.Fatal(err)
	}
	if !hasFS(string(fss), "nfs") {
		t.Skip("this kernel has no nfs filesystem (/proc/filesystems lacks nfs); the go-nfs-client tests cover the server")
	}
	needRoot(t)
	e := export(t, "data")
	_, addr := serve(t, e)
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	opts := fmt.Sprintf("vers=3,proto=tcp,port=%s,mountport=%s,mountproto=tcp,mountvers=3,"+
		"nolock,hard,sync,noac,lookupcache=none,addr=127.0.0.1", port, port)
	if err := unix.Mount("127.0.0.1:/data", mnt, "nfs", 0, opts); err != nil {
		t.Fatalf("mount -t nfs -o %s 127.0.0.1:/data: %v", opts, err)
	}
	// Registered after serve's cleanup, so it runs first: a hard mount
	// whose server is gone would hang.
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("umount: %v", err)
			_ = unix.Unmount(mnt, unix.MNT_DETACH|unix.MNT_FORCE)
		}
	})
	kernelEveryday(t, mnt, e.Dir)
}

func kernelEveryday(t *testing.T, mnt, dir string) {
	data := bytes.Repeat([]byte("through the kernel\n"), 100000)
	if err := os.WriteFile(filepath.Join(mnt, "f"), data, 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("on the host: %d bytes, %v", len(got), err)
	}
	checkOwner(t, filepath.Join(dir, "f"), testUID, testGID)
	if err := os.Chmod(filepath.Join(mnt, "f"), 0o4755); err != nil {
		t.Fatalf("chmod: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "f")); err != nil || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("after chmod 4755: %v, %v", fi.Mode(), err)
	}
	if err := os.MkdirAll(filepath.Join(mnt, "d", "e"), 0o755); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	if err := os.Rename(filepath.Join(mnt, "f"), filepath.Join(mnt, "d", "e", "g")); err != nil {
		t.Fatalf("rename: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "d", "e", "g")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(mnt, "l")); err != nil {
		t.Fatalf("symlink: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(mnt, "d")); err != nil {
		t.Fatalf("remove: %v", err)
	}
	ents, err := os.ReadDir(mnt)
	if err != nil || len(ents) != 1 || ents[0].Name() != "l" {
		t.Errorf("listing %v, %v; want [l]", ents, err)
	}
}

// hasFS reports whether /proc/filesystems lists fs.
func hasFS(procFilesystems, fs string) bool {
	for _, line := range strings.Split(procFilesystems, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == fs {
			return true
		}
	}
	return false
}
