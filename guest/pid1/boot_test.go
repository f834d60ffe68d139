package pid1

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const bootHelperEnv = "SANDLOT_PID1_BOOT_HELPER"

// The real executor assembles the overlay root from two real ext4 disks
// (loop devices) and switches into it — in a child process with a
// private mount namespace, so the host's mounts are untouched. Only
// power-off is left out.
// Longer than 60 lines: one boot, checked step by step.
func TestBootInMountNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("run as root: the test mounts loop devices in a private mount namespace")
	}
	for _, tool := range []string{"mkfs.ext4", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install e2fsprogs and mount (util-linux)", tool)
		}
	}
	dir := t.TempDir()
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "etc", "marker"), []byte("from-base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, rw := filepath.Join(dir, "base.img"), filepath.Join(dir, "rw.img")
	for _, img := range []string{base, rw} {
		if err := os.WriteFile(img, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 8<<20); err != nil {
			t.Fatal(err)
		}
	}
	run("mkfs.ext4", "-q", "-d", tree, base)
	run("mkfs.ext4", "-q", rw)
	var loops []string
	t.Cleanup(func() {
		for _, l := range loops {
			_ = exec.Command("losetup", "-d", l).Run()
		}
	})
	for _, a := range [][]string{{"-r", base}, {rw}} {
		out, err := exec.Command("losetup", append([]string{"-f", "--show"}, a...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("losetup (needs loop device support): %v: %s", err, out)
		}
		loops = append(loops, strings.TrimSpace(string(out)))
	}

	spec, _ := json.Marshal(map[string]string{
		"base": loops[0], "writable": loops[1], "newroot": filepath.Join(dir, "newroot"),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBootHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), bootHelperEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // Go makes / rprivate too
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "BOOT-OK") {
		t.Fatalf("boot helper: %v\n%s", err, out)
	}
	// The writable layer kept the new file, in its upper directory.
	mnt := filepath.Join(dir, "check")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	check := exec.Command("sh", "-c", fmt.Sprintf("mount -o ro %s %s && cat %s/upper/written; umount %s",
		loops[1], mnt, mnt, mnt))
	check.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if got, err := check.CombinedOutput(); err != nil || string(got) != "written-in-guest\n" {
		t.Errorf("writable layer: %v %q", err, got)
	}
}

// TestBootHelper is the child of TestBootInMountNamespace.
func TestBootHelper(t *testing.T) {
	raw := os.Getenv(bootHelperEnv)
	if raw == "" {
		t.Skip("runs as the child of TestBootInMountNamespace")
	}
	var spec map[string]string
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	in := New(Config{
		BaseDevice: spec["base"], WritableDevice: spec["writable"], NewRoot: spec["newroot"],
		Logger: quietLogger(),
	})
	plan, err := Plan(in.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.execute(plan); err != nil {
		t.Fatal(err)
	}
	// Now inside the new root.
	if b, err := os.ReadFile("/etc/marker"); err != nil || string(b) != "from-base\n" {
		t.Errorf("base file: %q %v", b, err)
	}
	if err := os.WriteFile("/written", []byte("written-in-guest\n"), 0o644); err != nil {
		t.Errorf("write to the root: %v", err)
	}
	if b, err := os.ReadFile(WritableMount + "/upper/written"); err != nil || string(b) != "written-in-guest\n" {
		t.Errorf("upper layer: %q %v", b, err)
	}
	for path, magic := range map[string]int64{
		"/": unix.OVERLAYFS_SUPER_MAGIC, "/tmp": unix.TMPFS_MAGIC, "/run": unix.TMPFS_MAGIC,
		"/proc": unix.PROC_SUPER_MAGIC, "/sys": unix.SYSFS_MAGIC, "/dev/pts": unix.DEVPTS_SUPER_MAGIC,
		BaseMount: unix.EXT4_SUPER_MAGIC, WritableMount: unix.EXT4_SUPER_MAGIC,
	} {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil || st.Type != magic {
			t.Errorf("%s: fs type %#x (%v), want %#x", path, st.Type, err, magic)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(BaseMount, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("base not read-only: flags %#x %v", st.Flags, err)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Error(err)
	}
	unix.Sync()
	if !t.Failed() {
		fmt.Println("BOOT-OK")
	}
}
