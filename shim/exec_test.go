package shim

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestExec: an exec runs in the app container's VM with its own spec;
// its exit is its own (the VM and the app run on).
func TestExec(t *testing.T) {
	h := newHarness(t)
	m, _ := h.startedPod()
	proc := specs.Process{Args: []string{"bash", "-l"}, Env: []string{"TERM=xterm"}, Cwd: "/root", Terminal: true,
		User: specs.User{UID: 1000, GID: 1000}, ConsoleSize: &specs.Box{Width: 120, Height: 40}}
	h.drain()
	if err := h.exec(testExec, proc, stdio{Terminal: true}); err != nil {
		t.Fatal(err)
	}
	if e := event[*eventstypes.TaskExecAdded](h); e.ContainerID != testApp || e.ExecID != testExec {
		t.Fatalf("exec added %+v", e)
	}
	if st := h.state(testApp, testExec); st.Status != task.Status_CREATED || !st.Terminal {
		t.Fatalf("exec state %v terminal %v", st.Status, st.Terminal)
	}
	resp, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp, ExecID: testExec})
	if err != nil || resp.Pid != uint32(m.pid) {
		t.Fatalf("start = %v, %v", resp, err)
	}
	if e := event[*eventstypes.TaskExecStarted](h); e.ExecID != testExec || e.Pid != uint32(m.pid) {
		t.Fatalf("exec started %+v", e)
	}
	started, _ := m.guest.snapshot()
	p := started[len(started)-1]
	if p.Args[0] != "bash" || p.Cwd != "/root" || !p.Terminal || *p.UID != 1000 || *p.GID != 1000 || p.Cols != 120 || p.Rows != 40 {
		t.Fatalf("guest start params %+v", p)
	}
	pid := h.guestPID(testApp, testExec)
	if m.label(labelInitPID) != "101" {
		t.Fatalf("the exec took the init's label: %q", m.label(labelInitPID))
	}
	m.guest.exit(pid, 7)
	if e := event[*eventstypes.TaskExit](h); e.ContainerID != testApp || e.ID != testExec || e.ExitStatus != 7 {
		t.Fatalf("exit event %+v", e)
	}
	if m.stopped() || h.state(testApp, "").Status != task.Status_RUNNING {
		t.Fatal("an exec's exit ended the app")
	}
}

// TestExecErrors: Exec requests the shim refuses.
func TestExecErrors(t *testing.T) {
	h := newHarness(t)
	h.startedPod()
	if err := h.exec(testExec, specs.Process{Args: []string{"sh"}}, stdio{}); err != nil {
		t.Fatal(err)
	}
	sh := &anypb.Any{Value: []byte(`{"args":["sh"]}`)}
	for _, tc := range []struct {
		name string
		req  *taskAPI.ExecProcessRequest
		code codes.Code
	}{
		{name: "in the pause container", req: &taskAPI.ExecProcessRequest{ID: testPod, ExecID: "x", Spec: sh}, code: codes.Unimplemented},
		{name: "unknown container", req: &taskAPI.ExecProcessRequest{ID: "nope", ExecID: "x", Spec: sh}, code: codes.NotFound},
		{name: "taken exec ID", req: &taskAPI.ExecProcessRequest{ID: testApp, ExecID: testExec, Spec: sh}, code: codes.AlreadyExists},
		{name: "bad spec", req: &taskAPI.ExecProcessRequest{ID: testApp, ExecID: "x", Spec: &anypb.Any{Value: []byte("{")}},
			code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.s.Exec(h.ctx, tc.req)
			wantCode(t, "exec", err, tc.code)
		})
	}
	for _, tc := range []struct {
		name, id, execID string
		code             codes.Code
	}{
		{name: "state of an unknown exec", id: testApp, execID: "nope", code: codes.NotFound},
		{name: "state of an unknown container", id: "nope", code: codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.s.State(h.ctx, &taskAPI.StateRequest{ID: tc.id, ExecID: tc.execID})
			wantCode(t, "state", err, tc.code)
		})
	}
	if err := h.exec("nocmd", specs.Process{}, stdio{}); err != nil {
		t.Fatal(err)
	}
	_, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp, ExecID: "nocmd"})
	wantCode(t, "start an exec without a command", err, codes.InvalidArgument)
}

// TestExecStdio: the guest's output reaches the FIFOs containerd gave,
// stdin reaches the guest, and its EOF closes the guest's stdin.
func TestExecStdio(t *testing.T) {
	h := newHarness(t)
	m, _ := h.startedPod()
	dir := t.TempDir()
	std := stdio{Stdin: filepath.Join(dir, "in"), Stdout: filepath.Join(dir, "out"), Stderr: filepath.Join(dir, "err")}
	for _, f := range []string{std.Stdin, std.Stdout, std.Stderr} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.exec(testExec, specs.Process{Args: []string{"cat"}}, std); err != nil {
		t.Fatal(err)
	}
	// containerd opens its ends as the shim opens its own.
	outs := make(chan string, 2)
	for _, f := range []string{std.Stdout, std.Stderr} {
		go func() {
			r, err := os.Open(f)
			if err != nil {
				outs <- err.Error()
				return
			}
			defer r.Close()
			b, _ := io.ReadAll(r)
			outs <- filepath.Base(f) + ":" + string(b)
		}()
	}
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp, ExecID: testExec}); err != nil {
		t.Fatal(err)
	}
	in, err := os.OpenFile(std.Stdin, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	in.Close()
	pid := h.guestPID(testApp, testExec)
	eventually(t, "stdin to reach the guest", func() bool {
		m.guest.mu.Lock()
		defer m.guest.mu.Unlock()
		return string(m.guest.stdin[pid]) == "hello" && m.guest.stdinClosed[pid]
	})
	m.guest.output(pid, "stdout", "out!")
	m.guest.output(pid, "stderr", "err!")
	m.guest.exit(pid, 0)
	got := map[string]bool{<-outs: true, <-outs: true}
	if !got["out:out!"] || !got["err:err!"] {
		t.Fatalf("FIFOs read %v", got)
	}
}

// TestCloseIOAfterStdin is CRI's exec with stdin (kubectl cp's tar):
// containerd writes the stream into the FIFO, closes its end and calls
// CloseIO at once. Every byte still in the FIFO reaches the guest before
// its stdin closes.
func TestCloseIOAfterStdin(t *testing.T) {
	payload := strings.Repeat("archive!", 6<<10) // 48 KiB: all of it fits in the FIFO
	h, m := execWithStdin(t, 20*time.Millisecond, []string{"tar", "-x"}, payload)
	if _, err := h.s.CloseIO(h.ctx, &taskAPI.CloseIORequest{ID: testApp, ExecID: testExec, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	pid := h.guestPID(testApp, testExec)
	m.guest.mu.Lock()
	got, closed := len(m.guest.stdin[pid]), m.guest.stdinClosed[pid]
	m.guest.mu.Unlock()
	if got != len(payload) || !closed {
		t.Fatalf("after CloseIO the guest had %d of %d stdin bytes, stdin closed %v", got, len(payload), closed)
	}
}

// TestCloseIOBoundedByAStuckGuest: a guest that does not take its stdin
// holds CloseIO only stdinDrainWait; its stdin is closed then all the same.
func TestCloseIOBoundedByAStuckGuest(t *testing.T) {
	defer func(w time.Duration) { stdinDrainWait = w }(stdinDrainWait)
	stdinDrainWait = 100 * time.Millisecond
	h, m := execWithStdin(t, 3*time.Second /* each write hangs this long */, []string{"sleep", "inf"}, "never read")
	began := time.Now()
	if _, err := h.s.CloseIO(h.ctx, &taskAPI.CloseIORequest{ID: testApp, ExecID: testExec, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	pid := h.guestPID(testApp, testExec)
	m.guest.mu.Lock()
	closed := m.guest.stdinClosed[pid]
	m.guest.mu.Unlock()
	if took >= 3*time.Second || !closed {
		t.Fatalf("CloseIO took %v (the guest's write hangs 3 s, the bound is %v); stdin closed %v", took, stdinDrainWait, closed)
	}
}

// execWithStdin starts exec testExec of args with its stdin a FIFO, as
// CRI's exec with stdin does, the fake guest taking each write after
// delay; it writes payload into the FIFO and closes the writing end.
func execWithStdin(t *testing.T, delay time.Duration, args []string, payload string) (*harness, *fakeMachine) {
	t.Helper()
	h := newHarness(t)
	m, _ := h.startedPod()
	m.guest.mu.Lock()
	m.guest.stdinDelay = delay
	m.guest.mu.Unlock()
	std := stdio{Stdin: filepath.Join(t.TempDir(), "in")}
	if err := syscall.Mkfifo(std.Stdin, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.exec(testExec, specs.Process{Args: args}, std); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp, ExecID: testExec}); err != nil {
		t.Fatal(err)
	}
	in, err := os.OpenFile(std.Stdin, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.WriteString(payload); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	return h, m
}

// TestResizeCloseIO: pty and stdin calls reach the guest process while
// it runs, and are no-ops otherwise.
func TestResizeCloseIO(t *testing.T) {
	h := newHarness(t)
	m, pid := h.startedPod()
	if _, err := h.s.ResizePty(h.ctx, &taskAPI.ResizePtyRequest{ID: testApp, Width: 80, Height: 24}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.CloseIO(h.ctx, &taskAPI.CloseIORequest{ID: testApp, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	m.guest.mu.Lock()
	size, closed := m.guest.resized[pid], m.guest.stdinClosed[pid]
	m.guest.mu.Unlock()
	if size != [2]uint16{80, 24} || !closed {
		t.Fatalf("guest size %v, stdin closed %v", size, closed)
	}
	if err := h.exec(testExec, specs.Process{Args: []string{"sh"}}, stdio{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*taskAPI.ResizePtyRequest{{ID: testPod, Width: 1}, {ID: testApp, ExecID: testExec, Width: 1}} {
		if _, err := h.s.ResizePty(h.ctx, r); err != nil {
			t.Fatalf("resize %s/%s: %v", r.ID, r.ExecID, err)
		}
	}
	_, err := h.s.ResizePty(h.ctx, &taskAPI.ResizePtyRequest{ID: "nope"})
	wantCode(t, "resize unknown", err, codes.NotFound)
}
