// Package shimtest runs the sandlot shim under a real containerd (CRI,
// CNI bridge) with real QEMU: the shim's tests and benchmark share it.
package shimtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sandlot-dev/sandlot/api/node"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/poll"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// Handler is the CRI runtime handler the harness registers the shim as.
const Handler = "sandlot"

// Env is a containerd with the sandlot runtime and its shim config.
type Env struct {
	*crienv.Env
	Config node.Config
}

// Start builds the shim, writes its config (everything under one
// directory, guest RAM in a private /dev/shm directory) and starts
// containerd with it.
func Start(t crienv.T) *Env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("run as root: the shim mounts image layers, makes taps and runs QEMU")
	}
	assets, err := vmtest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	mem, err := os.MkdirTemp("/dev/shm", "sandlot-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mem) })
	bin := filepath.Join(dir, "bin")
	buildShim(t, bin)
	cfg := node.Config{Root: filepath.Join(dir, "sandlot"), ImageDir: filepath.Join(dir, "images"), MemoryDir: mem, DiskDir: filepath.Join(dir, "vms"),
		Kernel: assets.Assets.Kernel, Initrd: assets.Assets.Initrd, Modules: assets.Assets.Modules,
		DefaultMemoryMiB: 256}
	cfgPath := filepath.Join(dir, "sandlot-shim.json")
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	env := crienv.Start(t, crienv.Options{Dir: filepath.Join(dir, "c"), ShimDir: bin, SandlotConfig: cfgPath})
	return &Env{Env: env, Config: cfg}
}

// buildShim compiles the shim binary (static, as it ships) into dir.
func buildShim(t crienv.T, dir string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "containerd-shim-sandlot-v2"), "./cmd/containerd-shim-sandlot-v2")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the shim: %v: %s", err, out)
	}
}

// Control dials the control API of a pod's VM.
func (e *Env) Control(t crienv.T, podUID string) *controlapi.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := controlapi.Dial(ctx, e.Config.Layout().ControlSocket(podUID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// RestoreAnnotations make a pod start from the snapshot in dir (no node
// agent here: the shim reads the directory the location names).
func RestoreAnnotations(dir string) map[string]string {
	ann, err := sandlotv1.VMAnnotations{Restore: &sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot,
		Name: filepath.Base(dir), UID: filepath.Base(dir), Location: dir}}.Encode()
	if err != nil {
		panic(err) // a constant shape
	}
	return ann
}

// vmLeftovers lists what a VM leaves if not cleaned up: QEMU processes,
// pod directories (control sockets, VM run dirs), guest RAM files.
func (e *Env) vmLeftovers() []string {
	var out []string
	// A pgrep that fails cannot say the host is clean: its error is listed.
	procs, err := pgrep("qemu-system.*pod-")
	if err != nil {
		out = append(out, err.Error())
	}
	for _, p := range procs {
		out = append(out, "qemu: "+p)
	}
	return append(out, globs(filepath.Join(e.Config.Root, "pods", "*"), filepath.Join(e.Config.MemoryDir, "*"))...)
}

// pgrep lists the processes whose command line matches pattern, each as
// "<pid> <command line>". None is an empty list (pgrep's exit 1); pgrep
// failing otherwise is an error with its exit code and stderr.
func pgrep(pattern string) ([]string, error) {
	cmd := exec.Command("pgrep", "-af", pattern)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 && stderr.Len() == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgrep -af %q: %w: %s", pattern, err, strings.TrimSpace(stderr.String()))
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// pgrepOne is the pid of the one process whose command line matches
// pattern.
func pgrepOne(pattern string) (int, error) {
	procs, err := pgrep(pattern)
	if err != nil {
		return 0, err
	}
	if len(procs) != 1 {
		return 0, fmt.Errorf("%d processes match %q, want one: %q", len(procs), pattern, procs)
	}
	pid, err := strconv.Atoi(strings.Fields(procs[0])[0])
	if err != nil {
		return 0, fmt.Errorf("pgrep -af %q printed %q: %w", pattern, procs[0], err)
	}
	return pid, nil
}

// leftovers adds what a removed pod must not leave: mounts under the
// environment and network namespaces (with the taps in them).
func (e *Env) leftovers() []string {
	out := e.vmLeftovers()
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], e.Dir+"/") {
				out = append(out, "mount: "+f[4])
			}
		}
	}
	return append(out, globs(filepath.Join(e.Dir, "state", "io.containerd.grpc.v1.cri", "netns", "*"))...)
}

func globs(patterns ...string) []string {
	var out []string
	for _, pattern := range patterns {
		m, _ := filepath.Glob(pattern)
		for _, p := range m {
			out = append(out, "file: "+p)
		}
	}
	return out
}

// WaitNoLeftovers waits until the host is clean of every pod, or fails
// listing what is left.
func (e *Env) WaitNoLeftovers(t crienv.T) { e.waitClean(t, e.leftovers) }

// WaitVMsGone waits until no VM is left (pods may still hold their netns).
func (e *Env) WaitVMsGone(t crienv.T) { e.waitClean(t, e.vmLeftovers) }

func (e *Env) waitClean(t crienv.T, list func() []string) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, "nothing left behind", func() error {
		if left := list(); len(left) > 0 {
			return fmt.Errorf("left behind:\n%s", strings.Join(left, "\n"))
		}
		return nil
	})
}

// HealthURL is envd's health endpoint at a pod IP.
func HealthURL(ip string) string { return fmt.Sprintf("http://%s:49983/health", ip) }
