package crienv

// Host prerequisites Start checks before touching anything: root, the
// containerd, runc, CNI, busybox and ip binaries, and the sandlot shim and
// config when the sandlot handler is asked for.

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// findBinaries fails the test with the command that installs what is missing.
func findBinaries(t T) binaries {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("crienv: needs root (containerd, runc, CNI, mounts)")
	}
	cache := os.Getenv("SANDLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
	}
	dir := filepath.Join(cache, "containerd", ContainerdVersion)
	for _, name := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if !isExecutable(filepath.Join(dir, name)) {
			t.Fatalf("crienv: %s not found in $SANDLOT_CACHE/containerd/%s (%s): run `make containerd-bins`", name, ContainerdVersion, dir)
		}
	}
	if !isExecutable(runcPath) {
		t.Fatalf("crienv: runc not found at %s: apt-get install runc", runcPath)
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if !isExecutable(filepath.Join(cniBinDir, p)) {
			t.Fatalf("crienv: CNI plugin %s not found in %s: apt-get install containernetworking-plugins", p, cniBinDir)
		}
	}
	if err := checkStatic(busyboxPath); err != nil {
		t.Fatalf("crienv: %v: apt-get install busybox-static", err)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Fatalf("crienv: ip not found: apt-get install iproute2")
	}
	return binaries{containerd: filepath.Join(dir, "containerd"), ctr: filepath.Join(dir, "ctr"), shimDir: dir, ip: ip}
}

// checkSandlot makes ShimDir and SandlotConfig absolute (containerd runs
// in Dir) and checks that the sandlot handler can work: its config exists
// and containerd will find the shim on its PATH.
func (e *Env) checkSandlot(t T) {
	t.Helper()
	for _, p := range []*string{&e.opts.ShimDir, &e.opts.SandlotConfig} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil || strings.ContainsAny(abs, "'\n:") {
			t.Fatalf("crienv: path %q: %v, or it has a quote, newline or colon (it goes into TOML and PATH)", *p, err)
		}
		*p = abs
	}
	if e.opts.SandlotConfig == "" || e.opts.ShimInstalledLater {
		return
	}
	if _, err := os.Stat(e.opts.SandlotConfig); err != nil {
		t.Fatalf("crienv: SandlotConfig: %v", err)
	}
	for _, dir := range e.pathDirs() {
		if isExecutable(filepath.Join(dir, "containerd-shim-sandlot-v2")) {
			return
		}
	}
	t.Fatalf("crienv: containerd-shim-sandlot-v2 not found on containerd's PATH %v: go build -o <ShimDir>/ ./cmd/containerd-shim-sandlot-v2",
		e.pathDirs())
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// checkStatic makes sure busybox runs in an image that has no libc.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("busybox: %w", err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", p)
		}
	}
	return nil
}
