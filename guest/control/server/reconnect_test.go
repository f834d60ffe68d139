package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/control"
)

// collectSub reads a subscription's events until the exit event.
func collectSub(t *testing.T, ch <-chan control.Event) (stdout, stderr string, dropped int64, exit control.ExitStatus) {
	t.Helper()
	var out, errb strings.Builder
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("events closed before exit")
			}
			switch ev.Name {
			case control.EventOutput:
				dropped += ev.Dropped
				if ev.Stream == control.StreamStderr {
					errb.Write(ev.Data)
				} else {
					out.Write(ev.Data)
				}
			case control.EventExit:
				return out.String(), errb.String(), dropped, *ev.Exit
			}
		case <-timeout:
			t.Fatalf("no exit within 10s (stdout %q)", out.String())
		}
	}
}

// startDetached runs script through a first client that then goes away,
// and waits (in the guest) until it has exited. The script is held at a
// fifo until that client is closed, so all its output is produced while
// no host is connected.
func startDetached(t *testing.T, h *Handler, path, script string) int {
	t.Helper()
	ctx := testCtx(t)
	fifo := filepath.Join(t.TempDir(), "gate")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c1 := dial(t, path)
	p, err := c1.Start(ctx, control.StartParams{
		Args: []string{"sh", "-c", `read _ <"$GATE"; ` + script},
		Env:  []string{"GATE=" + fifo},
	})
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	// O_RDWR does not wait for the reader; the gate stays open until the
	// script has read its line.
	gate, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	if _, err := gate.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(ctx, p.PID); err != nil {
		t.Fatal(err)
	}
	h.ev.mu.Lock()
	queued := len(h.ev.backlog)
	h.ev.mu.Unlock()
	if queued == 0 {
		t.Fatal("no events queued while no host was connected")
	}
	return p.PID
}

func TestReconnectDeliversBufferedOutput(t *testing.T) {
	h := newHandler(t, Options{})
	path := serveSocketT(t, h)
	pid := startDetached(t, h, path, "echo late; echo err-late >&2; exit 3")

	// A new host connects: the guest still serves, and the buffered
	// events come first.
	c2 := dial(t, path)
	stdout, stderr, dropped, exit := collectSub(t, c2.Subscribe(pid).C)
	if stdout != "late\n" || stderr != "err-late\n" || dropped != 0 || exit.Status != 3 {
		t.Errorf("stdout %q stderr %q dropped %d exit %+v", stdout, stderr, dropped, exit)
	}
	ctx := testCtx(t)
	if st, err := c2.Wait(ctx, pid); err != nil || st.Status != 3 {
		t.Errorf("wait after reconnect: %+v %v", st, err)
	}
	if _, err := c2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// Delivered once: a third host gets nothing more for it.
	c2.Close()
	c3 := dial(t, path)
	p, err := c3.Start(ctx, control.StartParams{Args: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, exit := collectSub(t, p.Events()); exit.Status != 0 {
		t.Errorf("exit %+v", exit)
	}
	select {
	case ev := <-c3.Subscribe(pid).C:
		t.Errorf("old event redelivered: %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestBufferedOutputIsBounded(t *testing.T) {
	const limit = 1024
	h := newHandler(t, Options{MaxBufferedOutput: limit})
	path := serveSocketT(t, h)
	pid := startDetached(t, h, path, "head -c 10000 /dev/zero | tr '\\0' a; printf end")
	c := dial(t, path)
	stdout, _, dropped, exit := collectSub(t, c.Subscribe(pid).C)
	if exit.Status != 0 {
		t.Fatalf("exit %+v", exit)
	}
	if len(stdout) > limit || int64(len(stdout))+dropped != 10003 || !strings.HasSuffix(stdout, "aaend") {
		t.Errorf("kept %d bytes (ending %q), dropped %d; want ≤ %d kept, newest last, 10003 in all",
			len(stdout), stdout[max(0, len(stdout)-5):], dropped, limit)
	}
}

// A second host takes over: the first connection is closed, the second
// is served.
func TestNewConnectionTakesOver(t *testing.T) {
	h := newHandler(t, Options{})
	path := serveSocketT(t, h)
	c1 := dial(t, path)
	if _, err := c1.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, path)
	if _, err := c2.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("first connection still open")
	}
	p, err := c2.Start(testCtx(t), control.StartParams{Args: []string{"echo", "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if stdout, _, _, _ := collectSub(t, p.Events()); stdout != "hi\n" {
		t.Errorf("stdout %q", stdout)
	}
}

// Serve returns when its context ends and removes its socket.
func TestServeStops(t *testing.T) {
	h := newHandler(t, Options{})
	path := t.TempDir() + "/c.sock"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, path, h) }()
	c := dial(t, path)
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("client still connected")
	}
	if _, err := c.Ping(testCtx(t)); err == nil {
		t.Error("ping after close worked")
	}
}
