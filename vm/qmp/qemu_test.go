package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Integration tests against the real qemu-system-x86_64. A paused microvm
// (-S, or -incoming defer) needs no kernel, so these run anywhere QEMU is.

type qemuProc struct {
	cmd    *exec.Cmd
	dir    string
	sock   string
	exited chan struct{}
}

func startQEMU(t *testing.T, extra ...string) *qemuProc {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("qemu-system-x86_64 not found (%v): install qemu-system-x86", err)
	}
	dir := shortTempDir(t, "qmpq")
	sock := filepath.Join(dir, "qmp.sock")
	args := append([]string{"-machine", "microvm", "-accel", "tcg", "-nodefaults", "-no-user-config",
		"-display", "none", "-m", "64M", "-qmp", "unix:" + sock + ",server=on,wait=off"}, extra...)
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// If the test binary dies, QEMU must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	q := &qemuProc{cmd: cmd, dir: dir, sock: sock, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(q.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-q.exited
		if t.Failed() {
			t.Logf("qemu %v output:\n%s", args, out.String())
		}
	})
	return q
}

func (q *qemuProc) dial(t *testing.T) *Monitor {
	t.Helper()
	m, err := Dial(testCtx(t, 10*time.Second), q.sock)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func (q *qemuProc) waitExit(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-q.exited:
	case <-time.After(within):
		t.Fatalf("qemu still running after %v", within)
	}
}

func expectStatus(t *testing.T, ctx context.Context, m *Monitor, wantRunning bool, want string) {
	t.Helper()
	running, status, err := m.Status(ctx)
	if err != nil || running != wantRunning || status != want {
		t.Fatalf("Status = %v %q %v, want %v %q", running, status, err, wantRunning, want)
	}
}

func TestQEMUMonitorBasics(t *testing.T) {
	q := startQEMU(t, "-S")
	m := q.dial(t)
	ctx := testCtx(t, 10*time.Second)
	if v := m.Version(); !strings.HasPrefix(v.String(), "7.2") {
		t.Fatalf("QEMU version %s (%q), want 7.2.x", v, v.Package)
	}
	expectStatus(t, ctx, m, false, "prelaunch")

	var qe *Error
	if err := m.Execute(ctx, "no-such-command", nil, nil); !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Fatalf("unknown command: %v", err)
	}
	err := m.Execute(ctx, "query-status", map[string]int{"bogus": 1}, nil)
	if !errors.As(err, &qe) || qe.Class != "GenericError" || !strings.Contains(qe.Desc, "bogus") {
		t.Fatalf("bad argument: %v", err)
	}

	var wg sync.WaitGroup // concurrent callers on the real monitor
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if _, st, err := m.Status(ctx); err != nil || st != "prelaunch" {
					t.Errorf("concurrent Status: %q %v", st, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestQEMUMigrationSettings(t *testing.T) {
	q := startQEMU(t, "-S")
	m := q.dial(t)
	ctx := testCtx(t, 10*time.Second)
	if err := m.SetMigrationCapabilities(ctx, map[string]bool{"x-ignore-shared": true}); err != nil {
		t.Fatal(err)
	}
	caps, err := m.MigrationCapabilities(ctx)
	if err != nil || !caps["x-ignore-shared"] || caps["postcopy-ram"] {
		t.Fatalf("capabilities = %v, %v", caps, err)
	}
	params := map[string]any{"max-bandwidth": int64(100_000_000_000), "announce-rounds": 0}
	if err := m.SetMigrationParameters(ctx, params); err != nil {
		t.Fatal(err)
	}
	got, err := m.MigrationParameters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got["max-bandwidth"] != json.Number("100000000000") || got["announce-rounds"] != json.Number("0") {
		t.Fatalf("read back max-bandwidth %v announce-rounds %v", got["max-bandwidth"], got["announce-rounds"])
	}
	for _, name := range []string{"announce-initial", "announce-max", "announce-step", "downtime-limit"} {
		if _, ok := got[name]; !ok {
			t.Errorf("QEMU 7.2 has no migration parameter %q", name)
		}
	}
	var qe *Error
	if err := m.SetMigrationParameters(ctx, map[string]any{"announce-nonsense": 1}); !errors.As(err, &qe) {
		t.Fatalf("unknown parameter: %v", err)
	}
}

func TestQEMUEventsStopCont(t *testing.T) {
	q := startQEMU(t, "-S")
	m := q.dial(t)
	ctx := testCtx(t, 10*time.Second)
	if _, err := m.WaitEvent(ctx, "RESUME", nil, m.Cont); err != nil {
		t.Fatalf("cont: %v", err)
	}
	expectStatus(t, ctx, m, true, "running")
	if _, err := m.WaitEvent(ctx, "STOP", nil, m.Stop); err != nil {
		t.Fatalf("stop: %v", err)
	}
	expectStatus(t, ctx, m, false, "paused")
}

// Snapshot a paused VM into a pipe passed with getfd, then load the stream
// into a second QEMU started with -incoming defer.
func TestQEMUMigrateThroughFDs(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	src := startQEMU(t, "-S")
	sm := src.dial(t)
	state := filepath.Join(src.dir, "vm.state")
	n, info := snapshotToFile(t, ctx, sm, state)
	if info.RAM == nil || info.RAM.Total < 64<<20 || n < info.RAM.Transferred || n == 0 {
		t.Fatalf("stream %d bytes, info %+v ram %+v", n, info, info.RAM)
	}
	t.Logf("migration stream %d bytes in %d ms (ram transferred %d)", n, info.TotalTimeMs, info.RAM.Transferred)
	expectStatus(t, ctx, sm, false, "postmigrate")

	dst := startQEMU(t, "-incoming", "defer")
	dm := dst.dial(t)
	expectStatus(t, ctx, dm, false, "inmigrate")
	f, err := os.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	err = dm.SendFD(ctx, "st", f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := dm.MigrateIncoming(ctx, "fd:st"); err != nil {
		t.Fatal(err)
	}
	if info, err := dm.WaitMigration(ctx); err != nil || info.Status != "completed" {
		t.Fatalf("incoming: %+v, %v", info, err)
	}
	// No autostart: the destination takes the run state the source had when
	// it was stopped. A never-run (-S) source stays "prelaunch" through stop.
	expectStatus(t, ctx, dm, false, "prelaunch")
	if _, err := dm.WaitEvent(ctx, "RESUME", nil, dm.Cont); err != nil {
		t.Fatalf("cont on the restored VM: %v", err)
	}
	expectStatus(t, ctx, dm, true, "running")

	if err := dm.Quit(ctx); err != nil {
		t.Fatalf("Quit: %v", err)
	}
	select {
	case <-dm.Done():
	default:
		t.Fatal("Done not closed after Quit")
	}
	if !errors.Is(dm.Err(), ErrClosed) {
		t.Fatalf("Err after quit: %v", dm.Err())
	}
	var names []string
	for ev := range dm.Events() { // closed after Done, so this ends
		names = append(names, ev.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "SHUTDOWN") {
		t.Fatalf("events after quit: %v", names)
	}
	dst.waitExit(t, 5*time.Second)
}

// snapshotToFile stops the VM and migrates it to fd:mig, a pipe whose read
// end is copied into path. It returns the stream size and final info.
func snapshotToFile(t *testing.T, ctx context.Context, m *Monitor, path string) (int64, MigrationInfo) {
	t.Helper()
	if err := m.SetMigrationParameters(ctx, map[string]any{"max-bandwidth": int64(100_000_000_000)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, ctx, m, false, "prelaunch") // stop does not change prelaunch
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	err = m.SendFD(ctx, "mig", pw)
	pw.Close() // QEMU holds its copy; ours would keep the reader from seeing EOF
	if err != nil {
		t.Fatal(err)
	}
	copied := make(chan int64, 1)
	go func() { n, _ := io.Copy(out, pr); copied <- n }()
	if err := m.Migrate(ctx, "fd:mig"); err != nil {
		t.Fatal(err)
	}
	info, err := m.WaitMigration(ctx)
	if err != nil || info.Status != "completed" {
		t.Fatalf("WaitMigration = %+v, %v", info, err)
	}
	select {
	case n := <-copied:
		return n, info
	case <-ctx.Done():
		t.Fatal("migration stream never reached EOF")
		return 0, info
	}
}

func TestQEMUMigrateToUnknownFD(t *testing.T) {
	q := startQEMU(t, "-S")
	m := q.dial(t)
	var qe *Error
	if err := m.Migrate(testCtx(t, 10*time.Second), "fd:nosuch"); !errors.As(err, &qe) {
		t.Fatalf("migrate to unknown fd: %v", err)
	}
	t.Logf("QEMU says: %v", qe)
}

// SIGKILL while WaitMigration polls: the call must fail with ErrClosed fast.
func TestQEMUKilledDuringWaitMigration(t *testing.T) {
	q := startQEMU(t, "-incoming", "defer")
	m := q.dial(t)
	ctx := testCtx(t, 10*time.Second)
	pr, pw, err := os.Pipe() // nothing is ever written: the load waits forever
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	err = m.SendFD(ctx, "in", pr)
	pr.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateIncoming(ctx, "fd:in"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := m.WaitMigration(ctx); errc <- err }()
	select {
	case err := <-errc:
		t.Fatalf("WaitMigration returned before the kill: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	killed := time.Now()
	q.cmd.Process.Kill()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("WaitMigration after SIGKILL: %v", err)
		}
		t.Logf("returned %v after SIGKILL: %v", time.Since(killed), err)
	case <-time.After(time.Second):
		t.Fatal("WaitMigration still blocked 1 s after SIGKILL")
	}
	if err := m.Stop(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after death: %v", err)
	}
}
