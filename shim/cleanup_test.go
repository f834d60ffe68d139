package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCleanupRemovesLinksNotTargets plays a guest that escaped into its
// jailed QEMU (code as the VM's uid) and filled the VM's run and disk
// directories with links to root's files before its shim died: `shim
// delete`'s cleanup removes the links, never what they point to (the same
// os.RemoveAll as the pod's teardown and vm.Stop: unlinkat, and openat
// with O_NOFOLLOW for directories).
func TestCleanupRemovesLinksNotTargets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: plants links as another uid")
	}
	const vmUID = 200000
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	canary, outside := filepath.Join(base, "canary"), filepath.Join(base, "outside")
	if err := os.WriteFile(canary, []byte("root's secret\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, name := range []string{"run", "disk"} {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, vmUID, vmUID); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-ec", `ln -s "$1" layer.raw; ln -s "$2" dir; mkdir sub; ln -s "$2/keep" sub/keep; mkfifo console.log`,
			"attack", canary, outside)
		cmd.Dir = d
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: vmUID, Gid: vmUID}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("as uid %d: %v: %s", vmUID, err, out)
		}
		// A hard link to root's file: fs.protected_hardlinks keeps the VM's
		// uid from making it, a node without the sysctl would not.
		if err := os.Link(canary, filepath.Join(d, "qemu.log")); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, d)
	}
	var before syscall.Stat_t
	if err := syscall.Stat(canary, &before); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(base, "bundle")
	if err := os.Mkdir(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeCleanup(bundle, cleanupRecord{Paths: paths}); err != nil {
		t.Fatal(err)
	}
	if err := cleanupBundle(bundle); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	var after syscall.Stat_t
	b, err := os.ReadFile(canary)
	if err != nil || string(b) != "root's secret\n" || syscall.Stat(canary, &after) != nil ||
		after.Uid != before.Uid || after.Mode != before.Mode {
		t.Fatalf("the canary changed: %q (%v), uid %d mode %o; was uid %d mode %o", b, err, after.Uid, after.Mode, before.Uid, before.Mode)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "keep" {
		t.Fatalf("a file outside the VM's directories: %q, %v", b, err)
	}
}
