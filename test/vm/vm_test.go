package vmtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/internal/poll"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

// All of these run real QEMU (TCG on these machines) on the Debian base
// disk `make vm-assets` builds.

func loadEnv(t *testing.T) vmtest.Env {
	t.Helper()
	env, err := vmtest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func config(t *testing.T, g vmtest.Guest, base string) vm.Config {
	return vm.Config{Name: fmt.Sprintf("%s-%d", g.Name, os.Getpid()), RunDir: filepath.Join(t.TempDir(), g.Name),
		BaseDisk: base, Net: g.Net, LayerMiB: 512}
}

func guest(t *testing.T, name, ip string, n int) vmtest.Guest {
	t.Helper()
	g, err := vmtest.NewGuest(name, ip, n)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// run runs cmd in g and returns its trimmed stdout, failing the test on error.
func run(t *testing.T, ctx context.Context, g vmtest.Guest, cmd string) string {
	t.Helper()
	out, err := g.Run(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// bootParent cold-boots the Debian disk and snapshots it; the snapshot is
// shared by the tests of this package.
var parent struct {
	once   sync.Once
	snap   string
	bootID string
	err    error
}

func snapshotOfParent(t *testing.T) (string, string) {
	t.Helper()
	parent.once.Do(func() { parent.snap, parent.bootID, parent.err = makeParent(loadEnv(t)) })
	if parent.err != nil {
		t.Fatal(parent.err)
	}
	return parent.snap, parent.bootID
}

func makeParent(env vmtest.Env) (string, string, error) {
	dir, err := os.MkdirTemp("", "sandlot-vmtest-")
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, err := vmtest.NewGuest("parent", "10.0.2.15", 1)
	if err != nil {
		return "", "", err
	}
	cfg := vm.Config{Name: fmt.Sprintf("parent-%d", os.Getpid()), RunDir: filepath.Join(dir, "run"), BaseDisk: env.Debian, Net: g.Net, LayerMiB: 512}
	v, err := vm.Boot(ctx, env.Assets, cfg, g.Identity)
	if err != nil {
		return "", "", err
	}
	defer v.Stop()
	if err := g.WaitHealth(ctx); err != nil {
		return "", "", err
	}
	if _, err := g.RunCode(ctx, "1+1"); err != nil { // warm the interpreter into the snapshot
		return "", "", err
	}
	bootID, err := g.Run(ctx, "cat /proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", "", err
	}
	snap := filepath.Join(dir, "snap")
	if _, err := v.Snapshot(ctx, snap); err != nil {
		return "", "", err
	}
	// A first-generation VM's snapshot holds no network (its clones only
	// add theirs); the parent itself got its network back.
	out, err := g.Run(ctx, "ip -4 -o addr show eth0; ip route show default")
	if err != nil || !strings.Contains(out, g.IP+"/24") || !strings.Contains(out, "default via 10.0.2.2") {
		return "", "", fmt.Errorf("the parent's network after its snapshot: %q, %v", out, err)
	}
	return snap, strings.TrimSpace(bootID), nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if parent.snap != "" {
		os.RemoveAll(filepath.Dir(parent.snap))
	}
	os.Exit(code)
}

// restoreClone restores snap as a clone named name at ip, waits for its
// envd, and stops it when the test ends.
func restoreClone(t *testing.T, ctx context.Context, snap, name, ip string, n int) (*vm.VM, vmtest.Guest) {
	t.Helper()
	g := guest(t, name, ip, n)
	v, err := vm.Restore(ctx, "", config(t, g, ""), snap, g.Identity, loadEnv(t).Roots())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Stop() })
	if err := g.WaitHealth(ctx); err != nil {
		t.Fatal(err)
	}
	return v, g
}

// TestColdBoot: the guest's envd answers, runs a command as E2B's default
// user (the Debian image has the `user` account), and the code interpreter
// computes 1+1.
func TestColdBoot(t *testing.T) {
	env := loadEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := guest(t, "cold", "10.0.2.15", 2)
	start := time.Now()
	v, err := vm.Boot(ctx, env.Assets, config(t, g, env.Debian), g.Identity)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if err := g.WaitHealth(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cold boot to envd: %v", time.Since(start))
	if got := run(t, ctx, g, "echo hello; hostname; id -un"); got != "hello\ncold\nuser" {
		t.Fatalf("command: %q", got)
	}
	if got, err := g.RunCode(ctx, "1+1"); err != nil || got != "2" {
		t.Fatalf("runCode(1+1) = %q, %v", got, err)
	}
}

// TestConcurrentClones: 10 clones restored at once each take their own
// identity and entropy, keep the snapshot's boot ID, keep their writes to
// themselves, and leave the snapshot unchanged.
func TestConcurrentClones(t *testing.T) {
	snap, bootID := snapshotOfParent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 10
	guests := make([]vmtest.Guest, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		guests[i] = guest(t, fmt.Sprintf("clone%d", i), fmt.Sprintf("10.0.2.%d", 100+i), 100+i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := vm.Restore(ctx, "", config(t, guests[i], ""), snap, guests[i].Identity, loadEnv(t).Roots())
			if err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(func() { v.Stop() })
			errs[i] = guests[i].WaitHealth(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	for i, g := range guests {
		out := run(t, ctx, g, fmt.Sprintf(`hostname; ip -4 -o addr show eth0 | awk '{print $4}'; cat /proc/sys/kernel/random/boot_id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo; cat /etc/hostname; ip -o link show eth0 | grep -o 'ether [0-9a-f:]*'; echo value-%d > /tmp/mine; ls /tmp`, i))
		lines := strings.Split(out, "\n")
		if len(lines) < 7 || lines[0] != g.Name || lines[1] != g.IP+"/24" || lines[2] != bootID || lines[4] != g.Name ||
			lines[5] != "ether "+g.Identity.Network.MAC {
			t.Fatalf("%s: hostname/ip/boot id/etc hostname/mac = %q (want %s, %s/24, %s, %s, %s)", g.Name, out, g.Name, g.IP, bootID, g.Name, g.Identity.Network.MAC)
		}
		if other, dup := seen[lines[3]]; dup {
			t.Fatalf("%s and %s read the same /dev/urandom bytes %s", g.Name, other, lines[3])
		}
		seen[lines[3]] = g.Name
	}
	for i, g := range guests {
		if got := run(t, ctx, g, "cat /tmp/mine"); got != fmt.Sprintf("value-%d", i) {
			t.Fatalf("%s sees %q: a sibling's write leaked", g.Name, got)
		}
	}
	if err := snapshot.Verify(snap); err != nil {
		t.Fatalf("the snapshot changed under its clones: %v", err)
	}
}

// TestSnapshotOfRestoredVM: a clone that dirtied 32 MiB is snapshotted as
// a layer of its changed pages over the base; a restore finds its data.
func TestSnapshotOfRestoredVM(t *testing.T) {
	snap, _ := snapshotOfParent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v, g := restoreClone(t, ctx, snap, "dirty", "10.0.2.50", 50)
	sum := run(t, ctx, g, "head -c 32M /dev/urandom > /tmp/dirty && sha256sum /tmp/dirty")
	if _, err := g.RunCode(ctx, "kept = 'in memory'"); err != nil {
		t.Fatal(err)
	}
	snap2 := filepath.Join(t.TempDir(), "snap2")
	m, err := v.Snapshot(ctx, snap2)
	if err != nil {
		t.Fatal(err)
	}
	if m.MemoryLayer == nil || m.DirtyBytes < 32<<20 {
		t.Fatalf("restored VM's snapshot: layer %v, dirty %d bytes; want a layer of at least 32 MiB", m.MemoryLayer, m.DirtyBytes)
	}
	t.Logf("layered snapshot: paused %v, dirty %d MiB", time.Duration(m.PausedNanos), m.DirtyBytes>>20)
	v.Stop()
	_, g2 := restoreClone(t, ctx, snap2, "again", "10.0.2.51", 51)
	if got := run(t, ctx, g2, "sha256sum /tmp/dirty"); got != sum {
		t.Fatalf("dirty data after restore: %q, want %q", got, sum)
	}
	if got, err := g2.RunCode(ctx, "kept"); err != nil || got != "in memory" {
		t.Fatalf("in-memory value after restore: %q, %v", got, err)
	}
}

// TestPauseResume: a paused guest makes no progress; resumed, it goes on.
func TestPauseResume(t *testing.T) {
	snap, _ := snapshotOfParent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, g := restoreClone(t, ctx, snap, "pause", "10.0.2.60", 60)
	count := ticking(t, ctx, g)
	// The floor, measured here: how far the guest ticks in pauseFor while
	// it runs, with the same round trips around it as the pause below.
	const pauseFor = 2 * time.Second
	ref := count()
	time.Sleep(pauseFor) // the point: the guest runs for pauseFor
	running := count() - ref
	before := count()
	if err := v.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if v.State() != vm.Paused {
		t.Fatalf("state %s", v.State())
	}
	time.Sleep(pauseFor) // the point: nothing happens during pauseFor
	if err := v.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// Across the pause only the round trips tick, not the pauseFor between.
	during := count() - before
	if 2*during >= running {
		t.Fatalf("ticks: %d across the %v pause, %d in as long running: the paused guest went on", during, pauseFor, running)
	}
	poll.Eventually(t, 30*time.Second, "the guest ticking again after the resume", func() error {
		if after := count() - before - during; after < 5 {
			return fmt.Errorf("%d ticks since the resume", after)
		}
		return nil
	})
	if err := v.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.Pause(ctx); err == nil {
		t.Fatal("pausing a paused VM is an invalid transition")
	}
	st, err := v.Stats()
	if err != nil || st.PSSBytes <= 0 || st.PrivateBytes <= 0 || st.CPU <= 0 || st.PSSBytes > 1<<30 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
}

// ticking starts a loop in g that appends a line to /tmp/ticks every 50
// ms, waits until it ticks and returns a count of its lines so far.
func ticking(t *testing.T, ctx context.Context, g vmtest.Guest) func() int {
	t.Helper()
	run(t, ctx, g, "(while :; do echo t >> /tmp/ticks; sleep 0.05; done) >/dev/null 2>&1 &")
	count := func() int {
		var n int
		if _, err := fmt.Sscan(run(t, ctx, g, "wc -l < /tmp/ticks"), &n); err != nil {
			t.Fatalf("count the ticks: %v", err)
		}
		return n
	}
	poll.Eventually(t, 10*time.Second, "the guest ticking", func() error {
		if out, err := g.Run(ctx, "wc -l < /tmp/ticks"); err != nil || strings.TrimSpace(out) == "0" {
			return fmt.Errorf("%q, %v", out, err)
		}
		return nil
	})
	return count
}

// TestKilledQEMU: QEMU killed mid-operation gives a clear error; Stop
// leaves no process, socket, tmpfs file or run directory.
func TestKilledQEMU(t *testing.T) {
	env := loadEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := guest(t, "killed", "10.0.2.15", 70)
	cfg := config(t, g, env.Busy)
	v, err := vm.Boot(ctx, env.Assets, cfg, g.Identity)
	if err != nil {
		t.Fatal(err)
	}
	mem := filepath.Dir(v.RAMFile())
	if _, err := os.Stat(mem); err != nil {
		t.Fatalf("RAM file: %v", err)
	}
	if err := syscall.Kill(v.PID(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill qemu %d: %v", v.PID(), err)
	}
	_, err = v.Snapshot(ctx, filepath.Join(t.TempDir(), "snap"))
	if err == nil || !strings.Contains(err.Error(), "qemu exited") {
		t.Fatalf("snapshot of a killed VM: %v; want an error saying qemu exited", err)
	}
	if err := v.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{mem, cfg.RunDir} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	// Gone, and nothing else: signal 0 to a pid no process has is ESRCH.
	if err := syscall.Kill(v.PID(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("qemu %d still running (signal 0: %v)", v.PID(), err)
	}
}

// TestSnapshotWhenBaseIsGone: a clone whose base memory file was deleted
// under it (the VM keeps its mapping) is snapshotted with all of its RAM,
// reported as the full-RAM fallback, and that snapshot restores.
func TestSnapshotWhenBaseIsGone(t *testing.T) {
	dir := copySnapshot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v, g := restoreClone(t, ctx, dir, "orphan", "10.0.2.52", 52)
	sum := run(t, ctx, g, "head -c 8M /dev/urandom > /tmp/mine && sha256sum /tmp/mine")
	if err := os.Remove(filepath.Join(dir, snapshot.MemoryFile)); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "full")
	m, err := v.Snapshot(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if !m.FullRAM || m.MemoryLayer != nil {
		t.Fatalf("manifest: fullRAM %v, layer %v; want the full-RAM fallback", m.FullRAM, m.MemoryLayer)
	}
	v.Stop()
	_, g2 := restoreClone(t, ctx, snap, "adopted", "10.0.2.53", 53)
	if got := run(t, ctx, g2, "sha256sum /tmp/mine"); got != sum {
		t.Fatalf("after the fallback snapshot: %q, want %q", got, sum)
	}
}
