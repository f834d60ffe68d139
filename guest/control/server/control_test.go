package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/internal/version"
)

func TestPing(t *testing.T) {
	forEachTransport(t, func(t *testing.T, c *control.Client, _ *Handler) {
		r, err := c.Ping(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if r.Version != control.ProtocolVersion {
			t.Errorf("version %d", r.Version)
		}
		if len(r.BootID) != 36 {
			t.Errorf("bootID %q", r.BootID)
		}
		if r.UptimeNanos <= 0 {
			t.Errorf("uptime %d", r.UptimeNanos)
		}
	})
}

func TestSetIdentityRecordsAndReseeds(t *testing.T) {
	forEachTransport(t, func(t *testing.T, c *control.Client, h *Handler) {
		id := identity.Identity{
			SandboxID:   "abcdefghij0123456789",
			AccessToken: "tok",
			Env:         map[string]string{"FOO": "bar"},
			Hostname:    "sbx-abc",
			Network:     &identity.Network{Address: "10.88.0.5/24", Gateway: "10.88.0.1", MAC: "02:00:00:00:00:05"},
			UnixNano:    time.Now().UnixNano(),
		}
		res, err := c.SetIdentity(testCtx(t), id, bytes.Repeat([]byte{7}, 64))
		if err != nil {
			t.Fatal(err)
		}
		got := h.Store().Get()
		if got.SandboxID != id.SandboxID || got.AccessToken != "tok" || got.Env["FOO"] != "bar" ||
			got.Network == nil || got.Network.Address != "10.88.0.5/24" || got.UnixNano != id.UnixNano {
			t.Errorf("stored %+v", got)
		}
		if !res.Stored {
			t.Error("not stored")
		}
		if res.Agent != version.Version {
			t.Errorf("the result names agent %q, want %q", res.Agent, version.Version)
		}
		t.Logf("setIdentity result: %+v", res)
		// ApplyHost is false: the host's hostname, network and clock stay.
		if res.Hostname || res.Network || res.Clock {
			t.Errorf("applied to the host: %+v", res)
		}
		checkReseed(t, res)
	})
}

// checkReseed: the RNG ioctls worked, or the result says they lacked
// CAP_SYS_ADMIN.
func checkReseed(t *testing.T, res control.SetIdentityResult) {
	t.Helper()
	if res.Entropy && res.Reseeded {
		if len(res.Errors) != 0 {
			t.Errorf("errors %v", res.Errors)
		}
		return
	}
	if len(res.Errors) == 0 || !strings.Contains(strings.Join(res.Errors, ";"), "CAP_SYS_ADMIN") {
		t.Errorf("reseed failed without saying why: %+v", res)
	}
	if res.Err() == nil {
		t.Error("Err() is nil despite errors")
	}
}

// Two guests reseeded from the same identity and seed (as two clones of
// one snapshot would be, if the host reused a seed) still produce
// different random bytes: the seed is mixed with the time.
func TestReseedFromSameSeedDiffers(t *testing.T) {
	id := identity.Identity{SandboxID: "samesamesamesamesame"}
	seed := bytes.Repeat([]byte{42}, 32)
	var outs [][]byte
	for range 2 {
		h := newHandler(t, Options{})
		res := h.SetIdentity(control.SetIdentityParams{Identity: id, Seed: seed})
		checkReseed(t, res)
		f, err := os.Open("/dev/urandom")
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 32)
		if _, err := f.Read(b); err != nil {
			t.Fatal(err)
		}
		f.Close()
		outs = append(outs, b)
	}
	if bytes.Equal(outs[0], outs[1]) {
		t.Fatal("same random bytes after both reseeds")
	}
}

func TestPrepareSnapshot(t *testing.T) {
	forEachTransport(t, func(t *testing.T, c *control.Client, _ *Handler) {
		r, err := c.PrepareSnapshot(testCtx(t), false)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Synced || r.TookNanos <= 0 {
			t.Errorf("%+v", r)
		}
	})
}

// collect reads a process's events until its exit event.
func collect(t *testing.T, p *control.Process) (stdout, stderr string, exit control.ExitStatus) {
	t.Helper()
	var out, errb strings.Builder
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-p.Events():
			if !ok {
				t.Fatalf("events of %d closed before exit", p.PID)
			}
			switch ev.Name {
			case control.EventOutput:
				if ev.Stream == control.StreamStderr {
					errb.Write(ev.Data)
				} else {
					out.Write(ev.Data)
				}
			case control.EventExit:
				if _, ok := <-p.Events(); ok {
					t.Error("event after exit")
				}
				return out.String(), errb.String(), *ev.Exit
			}
		case <-timeout:
			t.Fatalf("no exit of %d within 10s (stdout %q)", p.PID, out.String())
		}
	}
}

func TestProcessOutputAndExitStatus(t *testing.T) {
	forEachTransport(t, func(t *testing.T, c *control.Client, _ *Handler) {
		ctx := testCtx(t)
		p, err := c.Start(ctx, control.StartParams{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}})
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, exit := collect(t, p)
		if stdout != "out\n" || stderr != "err\n" {
			t.Errorf("stdout %q stderr %q", stdout, stderr)
		}
		if exit.Status != 7 || exit.Signal != 0 || exit.PID != p.PID {
			t.Errorf("exit %+v", exit)
		}
		// wait works after the exit too.
		st, err := c.Wait(ctx, p.PID)
		if err != nil || st.Status != 7 {
			t.Errorf("wait: %+v %v", st, err)
		}
	})
}

// TestLogFIFO: lines any guest process writes to the log FIFO come out
// as the stdout of the process that asked for it, and the FIFO does not
// hold its exit back.
func TestLogFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "run", "log")
	c := pipeClient(t, newHandler(t, Options{LogFIFO: fifo}))
	ctx := testCtx(t)
	p, err := c.Start(ctx, control.StartParams{Args: []string{"sh", "-c", "echo own; read line; echo done"}, Log: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(fifo)
	if err != nil || st.Mode()&os.ModeNamedPipe == 0 || st.Mode().Perm() != 0o622 {
		t.Fatalf("the log FIFO: %v %v", st, err)
	}
	w, err := c.Start(ctx, control.StartParams{Args: []string{"sh", "-c", "echo from another process > " + fifo}})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, w)
	if err := c.WriteStdin(ctx, p.PID, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	stdout, _, exit := collect(t, p)
	if !strings.Contains(stdout, "own\n") || !strings.Contains(stdout, "from another process\n") || exit.Status != 0 {
		t.Fatalf("stdout %q, exit %+v", stdout, exit)
	}
}

func TestProcessEnvCwdAndPath(t *testing.T) {
	h := newHandler(t, Options{})
	h.Store().Set(identity.Identity{Env: map[string]string{"FROM_ID": "id", "OVERRIDDEN": "id"}})
	c := pipeClient(t, h)
	dir := t.TempDir()
	p, err := c.Start(testCtx(t), control.StartParams{
		Args: []string{"sh", "-c", `echo "$FROM_ID $OVERRIDDEN $PWD $PATH"`},
		Env:  []string{"OVERRIDDEN=req"},
		Cwd:  dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	stdout, _, exit := collect(t, p)
	if want := "id req " + dir + " " + DefaultPath + "\n"; stdout != want || exit.Status != 0 {
		t.Errorf("stdout %q (want %q), exit %+v", stdout, want, exit)
	}
	_, err = c.Start(testCtx(t), control.StartParams{Args: []string{"no-such-command-xyz"}})
	var e *control.Error
	if !errors.As(err, &e) || e.Code != control.CodeFailed || !strings.Contains(e.Message, "not found") {
		t.Errorf("start of a missing command: %v", err)
	}
	if _, err := c.Start(testCtx(t), control.StartParams{}); !errors.Is(err, &control.Error{Code: control.CodeInvalidParams}) {
		t.Errorf("start without args: %v", err)
	}
}

func TestStdin(t *testing.T) {
	forEachTransport(t, func(t *testing.T, c *control.Client, _ *Handler) {
		ctx := testCtx(t)
		p, err := c.Start(ctx, control.StartParams{Args: []string{"cat"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"hello\n", "world"} {
			if err := c.WriteStdin(ctx, p.PID, []byte(s)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.CloseStdin(ctx, p.PID); err != nil {
			t.Fatal(err)
		}
		stdout, _, exit := collect(t, p)
		if stdout != "hello\nworld" || exit.Status != 0 {
			t.Errorf("stdout %q exit %+v", stdout, exit)
		}
		if err := c.WriteStdin(ctx, p.PID, []byte("late")); err == nil {
			t.Error("write to a closed stdin worked")
		}
	})
}

func TestSignal(t *testing.T) {
	forEachTransport(t, func(t *testing.T, c *control.Client, _ *Handler) {
		ctx := testCtx(t)
		p, err := c.Start(ctx, control.StartParams{Args: []string{"sleep", "30"}})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := c.Signal(ctx, p.PID, int(syscall.SIGKILL)); err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx, p.PID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Signal != int(syscall.SIGKILL) || st.Status != 128+9 {
			t.Errorf("status %+v", st)
		}
		if time.Since(t0) > 5*time.Second {
			t.Error("sleep was not killed")
		}
		if err := c.Signal(ctx, p.PID, int(syscall.SIGTERM)); err == nil {
			t.Error("signal to an exited process worked")
		}
		if err := c.Signal(ctx, 999999999, 15); !errors.Is(err, &control.Error{Code: control.CodeNotFound}) {
			t.Errorf("signal to an unknown pid: %v", err)
		}
	})
}

func TestSignalGroup(t *testing.T) {
	c := pipeClient(t, newHandler(t, Options{}))
	ctx := testCtx(t)
	p, err := c.Start(ctx, control.StartParams{Args: []string{"sh", "-c", "sleep 30 & sleep 30; echo not-killed"}})
	if err != nil {
		t.Fatal(err)
	}
	// Signal once sh has forked both sleeps, so the group signal has
	// them to reach.
	poll.Eventually(t, 10*time.Second, "sh and its two sleeps in one process group", func() error {
		if n := groupSize(p.PID); n < 3 {
			return fmt.Errorf("%d in group %d", n, p.PID)
		}
		return nil
	})
	if err := c.SignalGroup(ctx, p.PID, int(syscall.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	stdout, _, exit := collect(t, p)
	if exit.Signal != int(syscall.SIGTERM) || stdout != "" {
		t.Errorf("exit %+v stdout %q", exit, stdout)
	}
}

func TestTerminal(t *testing.T) {
	c := pipeClient(t, newHandler(t, Options{}))
	ctx := testCtx(t)
	p, err := c.Start(ctx, control.StartParams{Args: []string{"sh", "-c", "tty; stty size; read x; echo got-$x"},
		Terminal: true, Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, p.PID, 100, 30); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteStdin(ctx, p.PID, []byte("abc\n")); err != nil {
		t.Fatal(err)
	}
	stdout, _, exit := collect(t, p)
	if !strings.Contains(stdout, "/dev/pts/") || !strings.Contains(stdout, "30 100") ||
		!strings.Contains(stdout, "got-abc") || exit.Status != 0 {
		t.Errorf("stdout %q exit %+v", stdout, exit)
	}
	q, err := c.Start(ctx, control.StartParams{Args: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, q.PID, 1, 1); !errors.Is(err, &control.Error{Code: control.CodeInvalidParams}) {
		t.Errorf("resize without a terminal: %v", err)
	}
}

// A wait whose context ends returns at once, is canceled in the guest,
// and the connection keeps working.
func TestCallCancellation(t *testing.T) {
	c := pipeClient(t, newHandler(t, Options{}))
	ctx := testCtx(t)
	p, err := c.Start(ctx, control.StartParams{Args: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(wctx, p.PID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Signal(ctx, p.PID, 9); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Signal != 9 {
		t.Fatalf("wait: %+v %v", st, err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	forEachTransport(t, func(t *testing.T, c *control.Client, _ *Handler) {
		ctx := testCtx(t)
		errs := make(chan error, 20)
		for i := range 20 {
			go func() {
				if i%2 == 0 {
					_, err := c.Ping(ctx)
					errs <- err
					return
				}
				p, err := c.Start(ctx, control.StartParams{Args: []string{"sh", "-c", "exit 3"}})
				if err == nil {
					var st control.ExitStatus
					if st, err = p.Wait(ctx); err == nil && st.Status != 3 {
						err = errors.New("wrong status")
					}
				}
				errs <- err
			}()
		}
		for range 20 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}
