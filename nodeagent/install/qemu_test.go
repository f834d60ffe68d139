package install

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/vm"
)

// systemLoader is glibc's loader on Debian: what a bundle's binary runs
// with until its PT_INTERP is set.
const systemLoader = "/lib64/ld-linux-x86-64.so.2"

// bundle makes a QEMU bundle as hack/qemu-bundle.sh lays one out, with
// Debian's env standing in for QEMU: a dynamically linked binary whose
// PT_INTERP patchelf padded as the script does, and the system's loader.
func bundle(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("patchelf"); err != nil {
		t.Fatal("patchelf not found: run hack/deps.sh (Debian's patchelf)")
	}
	dir := t.TempDir()
	bin, loader := filepath.Join(dir, vm.BundleBinary), filepath.Join(dir, vm.BundleLoader)
	for src, dst := range map[string]string{"/usr/bin/env": bin, systemLoader: loader} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pad := strings.Repeat("/", 200) + "opt/sandlot/qemu/" + vm.BundleLoader
	if out, err := exec.Command("patchelf", "--set-interpreter", pad, bin).CombinedOutput(); err != nil {
		t.Fatalf("patchelf: %v: %s", err, out)
	}
	for name, body := range map[string]string{vm.BundleManifest: `{"qemu":"test"}`, "share/qemu/bios-microvm.bin": "fw"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func interpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	t.Fatalf("%s: no PT_INTERP", path)
	return ""
}

// TestInstallQEMU: the bundle lands at its directory on the host with its
// binary's loader there (the binary runs), a second install changes
// nothing, files an older bundle left go, and uninstall removes it.
func TestInstallQEMU(t *testing.T) {
	n := newNode(t)
	// The host's own root, so that the loader path written is where the
	// loader is and the binary runs here.
	qdir := n.onHost("/var/lib/sandlot/qemu")
	o := Options{HostRoot: "/", ShimConfigPath: n.onHost(shimConfigPath), ShimConfig: n.options().ShimConfig,
		QEMU: Tree{Src: bundle(t), Dest: qdir}}
	old := filepath.Join(qdir, "lib/libold.so")
	n.put(old, "an older bundle's")
	res, err := Install(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(qdir, vm.BundleBinary)
	for _, p := range []string{old, bin, filepath.Join(qdir, vm.BundleManifest)} {
		if !slices.Contains(res.Changed, p) {
			t.Errorf("changed %v: want %s", res.Changed, p)
		}
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("an older bundle's file: %v, want it gone", err)
	}
	want := filepath.Join(qdir, vm.BundleLoader)
	if got := interpreter(t, bin); "/"+strings.TrimLeft(got, "/") != want {
		t.Errorf("PT_INTERP %q, want %s behind slashes", got, want)
	}
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
		t.Errorf("the installed binary: %v: %s", err, out)
	}
	if res, err := Install(context.Background(), o); err != nil || len(res.Changed) != 0 {
		t.Errorf("second install: changed %v, %v; want nothing", res.Changed, err)
	}
	if _, err := Uninstall(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(qdir); !os.IsNotExist(err) {
		t.Errorf("after uninstall the bundle's directory: %v", err)
	}
}

// TestUninstallQEMUKeepsOtherDirs: a --qemu-dir that holds no bundle is
// never emptied.
func TestUninstallQEMUKeepsOtherDirs(t *testing.T) {
	n := newNode(t)
	o := n.options()
	o.QEMU = Tree{Dest: "/var/lib"}
	n.put(n.onHost("/var/lib/precious"), "data")
	if _, err := Uninstall(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.read("/var/lib/precious"); !ok {
		t.Error("uninstall emptied a directory that is not a bundle")
	}
}

// TestSetInterpreterRefuses: a path longer than the room the bundle left,
// a relative one and a static binary are refused, not truncated.
func TestSetInterpreterRefuses(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(bundle(t), vm.BundleBinary))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setInterpreter(b, "/"+strings.Repeat("x", 300)); err == nil || !strings.Contains(err.Error(), "shorter directory") {
		t.Errorf("a loader path too long: %v", err)
	}
	if _, err := setInterpreter(b, "lib/ld.so"); err == nil {
		t.Error("a relative loader path was accepted")
	}
	static, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal("/bin/busybox: run hack/deps.sh (Debian's busybox-static)")
	}
	if _, err := setInterpreter(static, "/lib/ld.so"); err == nil || !strings.Contains(err.Error(), "PT_INTERP") {
		t.Errorf("a static binary: %v", err)
	}
}
