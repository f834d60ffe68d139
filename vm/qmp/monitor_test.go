package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDialHandshakeAndVersion(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) { c.drain() })
	v := m.Version()
	if v.String() != "7.2.22" || v.Major != 7 || v.Minor != 2 || v.Micro != 22 || v.Package != "fake" {
		t.Fatalf("version = %+v (%s), want 7.2.22 fake", v, v)
	}
	if !v.AtLeast(7, 2) || v.AtLeast(7, 3) || !v.AtLeast(6, 9) {
		t.Fatalf("AtLeast wrong for %s", v)
	}
	if m.Err() != nil {
		t.Fatalf("Err on open monitor: %v", m.Err())
	}
}

// Dial must retry through "no socket yet" and "socket refuses" (QEMU starting).
func TestDialRetriesUntilSocketServes(t *testing.T) {
	path := filepath.Join(shortTempDir(t, "qmpdial"), "qmp.sock")
	// A bound but not listening socket: connect gets ECONNREFUSED.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		unix.Close(fd)
		os.Remove(path) // ENOENT phase
		time.Sleep(50 * time.Millisecond)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Errorf("listen: %v", err)
			return
		}
		defer ln.Close()
		c, err := acceptFake(t, ln)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer c.c.Close()
		if c.handshake() {
			c.drain()
		}
	}()
	start := time.Now()
	m, err := Dial(testCtx(t, 5*time.Second), path)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer m.Close()
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("Dial returned after %v, before the socket existed", el)
	}
}

func TestDialGivesUpWithContext(t *testing.T) {
	path := filepath.Join(shortTempDir(t, "qmpdial"), "absent.sock")
	start := time.Now()
	_, err := Dial(testCtx(t, 100*time.Millisecond), path)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("err %q does not name the last dial error", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Dial took %v", el)
	}
}

func TestDialRejectsBadPeers(t *testing.T) {
	cases := map[string]func(c *fakeConn){
		"not a greeting": func(c *fakeConn) { c.send(`{"hello": 1}`); c.drain() },
		"garbage":        func(c *fakeConn) { c.send(`SSH-2.0-OpenSSH`); c.drain() },
		"eof":            func(c *fakeConn) {},
		"silent":         func(c *fakeConn) { c.drain() }, // only ctx ends this
		"caps refused": func(c *fakeConn) {
			c.send(fakeGreeting)
			if r, ok := c.expect("qmp_capabilities"); ok {
				c.send(`{"error": {"class": "GenericError", "desc": "nope"}, "id": ` + string(r.ID) + `}`)
			}
			c.drain()
		},
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(shortTempDir(t, "qmpbad"), "qmp.sock")
			ln := listenFake(t, path)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if c, err := acceptFake(t, ln); err == nil {
					defer c.c.Close()
					script(c)
				}
			}()
			start := time.Now()
			m, err := Dial(testCtx(t, 300*time.Millisecond), path)
			if err == nil {
				m.Close()
				t.Fatal("Dial succeeded against a bad peer")
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("Dial took %v", time.Since(start))
			}
			<-done
			t.Logf("error: %v", err)
		})
	}
}

// Replies are matched by id even when they come out of order, with events in between.
func TestConcurrentExecuteMatchesIDs(t *testing.T) {
	const n = 20
	m := dialFake(t, func(c *fakeConn) {
		var reqs []fakeRequest
		for range n {
			r, ok := c.expect("echo")
			if !ok {
				return
			}
			reqs = append(reqs, r)
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			c.send(`{"event": "TICK", "data": {}, "timestamp": {"seconds": 1, "microseconds": 2}}`)
			c.reply(reqs[i], string(reqs[i].Arguments))
		}
		c.drain()
	})
	ctx := testCtx(t, 5*time.Second)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var out struct{ N int }
			if err := m.Execute(ctx, "echo", map[string]int{"n": i}, &out); err != nil {
				t.Errorf("echo %d: %v", i, err)
			} else if out.N != i {
				t.Errorf("echo %d got reply for %d", i, out.N)
			}
		})
	}
	wg.Wait()
	ev := <-m.Events()
	if ev.Name != "TICK" || !ev.Time.Equal(time.Unix(1, 2000)) {
		t.Fatalf("event = %+v", ev)
	}
}

func TestQMPErrorIsTyped(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		if r, ok := c.expect("nope"); ok {
			c.send(`{"id": ` + string(r.ID) + `, "error": {"class": "CommandNotFound", "desc": "The command nope has not been found"}}`)
		}
		c.drain()
	})
	err := m.Execute(testCtx(t, 5*time.Second), "nope", nil, nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" || !strings.Contains(qe.Desc, "nope") {
		t.Fatalf("err = %v, want *Error CommandNotFound", err)
	}
	if errors.Is(err, ErrClosed) || !strings.HasPrefix(err.Error(), "nope: ") {
		t.Fatalf("err = %q", err)
	}
}

func TestEventsAndWaitEvent(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		if r, ok := c.expect("migrate"); ok {
			// Events before and after the reply, like QEMU does.
			c.send(`{"event": "MIGRATION", "data": {"status": "setup"}}`)
			c.reply(r, "{}")
			c.send(`{"event": "MIGRATION", "data": {"status": "active"}}`)
			c.send(`{"event": "MIGRATION", "data": {"status": "completed"}}`)
		}
		c.drain()
	})
	ctx := testCtx(t, 5*time.Second)
	status := func(ev Event) string {
		var d struct{ Status string }
		json.Unmarshal(ev.Data, &d)
		return d.Status
	}
	other := m.ExpectEvent("STOP", nil) // must not fire
	ev, err := m.WaitEvent(ctx, "MIGRATION", func(ev Event) bool { return status(ev) == "completed" },
		func(ctx context.Context) error { return m.Execute(ctx, "migrate", nil, nil) })
	if err != nil || status(ev) != "completed" {
		t.Fatalf("WaitEvent = %+v, %v", ev, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := other.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("STOP waiter: %v, want deadline", err)
	}
	var got []string
	for range 3 {
		got = append(got, status(<-m.Events()))
	}
	if strings.Join(got, ",") != "setup,active,completed" {
		t.Fatalf("Events() = %v", got)
	}
}

// A full Events() buffer drops the oldest events and never blocks replies.
func TestEventsDropOldest(t *testing.T) {
	const sent = eventBuffer + 44
	m := dialFake(t, func(c *fakeConn) {
		if r, ok := c.expect("flood"); ok {
			for i := range sent {
				c.send(`{"event": "E", "data": {"n": ` + itoa(i) + `}}`)
			}
			c.reply(r, "{}")
		}
		c.drain()
	})
	if err := m.Execute(testCtx(t, 5*time.Second), "flood", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := m.DroppedEvents(); got != sent-eventBuffer {
		t.Fatalf("DroppedEvents = %d, want %d", got, sent-eventBuffer)
	}
	first := <-m.Events()
	if string(first.Data) != `{"n": 44}` {
		t.Fatalf("oldest kept event = %s, want n 44", first.Data)
	}
	if len(m.Events()) != eventBuffer-1 {
		t.Fatalf("%d events left", len(m.Events()))
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestMalformedLinesAreSkipped(t *testing.T) {
	junk := []string{
		`garbage`, `[1,2]`, `{}`, `null`, `"str"`, `{"return": {}, "id": "not-ours"}`,
		`{"return": {}, "id": 99999}`, `{"event": "X", "timestamp": "bad"}`, `{"return": `,
	}
	m := dialFake(t, func(c *fakeConn) {
		if r, ok := c.expect("ping"); ok {
			c.send("") // empty lines are not even counted
			for _, j := range junk {
				c.send(j)
			}
			c.reply(r, `{"pong": true}`)
		}
		c.drain()
	})
	var out struct{ Pong bool }
	if err := m.Execute(testCtx(t, 5*time.Second), "ping", nil, &out); err != nil || !out.Pong {
		t.Fatalf("ping = %+v, %v", out, err)
	}
	if got := m.SkippedLines(); got != uint64(len(junk)) {
		t.Fatalf("SkippedLines = %d, want %d", got, len(junk))
	}
}

// QEMU omits the id when it could not parse a request; QMP answers in order.
func TestReplyWithoutIDGoesToOldest(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		if _, ok := c.expect("x"); ok {
			c.send(`{"error": {"class": "GenericError", "desc": "JSON parse error"}}`)
		}
		c.drain()
	})
	var qe *Error
	if err := m.Execute(testCtx(t, 5*time.Second), "x", nil, nil); !errors.As(err, &qe) {
		t.Fatalf("err = %v, want *Error", err)
	}
}

func TestOversizedLineClosesMonitor(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		if _, ok := c.expect("big"); ok {
			c.c.Write([]byte(`{"return": "` + strings.Repeat("a", maxLineSize+1)))
		}
		c.drain()
	})
	err := m.Execute(testCtx(t, 10*time.Second), "big", nil, nil)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, bufio.ErrTooLong) {
		t.Fatalf("err = %v, want ErrClosed wrapping ErrTooLong", err)
	}
}

// A peer vanishing mid-command fails pending and later calls promptly.
func TestEOFMidCommand(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		c.expect("stop") // then hang up without replying
	})
	ctx := testCtx(t, 10*time.Second)
	w := m.ExpectEvent("STOP", nil)
	start := time.Now()
	err := m.Stop(ctx)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, io.EOF) {
		t.Fatalf("Stop err = %v, want ErrClosed wrapping EOF", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Stop took %v after EOF", el)
	}
	select {
	case <-m.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed")
	}
	if _, err := w.Wait(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("event waiter: %v", err)
	}
	if _, err := m.WaitEvent(ctx, "X", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("late WaitEvent: %v", err)
	}
	if _, _, err := m.Status(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("later call: %v", err)
	}
	if _, err := m.WaitMigration(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitMigration: %v", err)
	}
	if _, ok := <-m.Events(); ok {
		t.Fatal("Events() not closed")
	}
	if !errors.Is(m.Err(), ErrClosed) {
		t.Fatalf("Err = %v", m.Err())
	}
}

func TestCloseFailsPendingCalls(t *testing.T) {
	sent := make(chan struct{})
	m := dialFake(t, func(c *fakeConn) {
		if _, ok := c.expect("never-answered"); ok {
			close(sent) // written, so registered as pending before
		}
		c.drain()
	})
	errc := make(chan error, 1)
	go func() { errc <- m.Execute(context.Background(), "never-answered", nil, nil) }()
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("the call never reached the fake")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) || !errors.Is(err, errClosedByClient) {
			t.Fatalf("pending call: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("pending call still blocked after Close")
	}
	m.Close() // idempotent
}

// A caller that gives up must not receive someone else's late reply.
func TestContextCancelDiscardsLateReply(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		slow, ok1 := c.expect("slow")
		fast, ok2 := c.expect("fast")
		if ok1 && ok2 {
			c.reply(slow, `"slow"`)
			c.reply(fast, `"fast"`)
		}
		c.drain()
	})
	ctx := testCtx(t, 5*time.Second)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := m.Execute(short, "slow", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow: %v", err)
	}
	var out string
	if err := m.Execute(ctx, "fast", nil, &out); err != nil || out != "fast" {
		t.Fatalf("fast = %q, %v", out, err)
	}
}

func TestSendFDPassesDescriptor(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		r, ok := c.expect("getfd")
		if !ok {
			return
		}
		if string(r.Arguments) != `{"fdname":"mig"}` || len(c.fds) != 1 {
			t.Errorf("getfd args %s, %d fds", r.Arguments, len(c.fds))
			return
		}
		unix.Write(c.fds[0], []byte("through the socket"))
		unix.Close(c.fds[0])
		c.reply(r, "{}")
		c.drain()
	})
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := m.SendFD(testCtx(t, 5*time.Second), "mig", pw); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	got, err := io.ReadAll(pr)
	if err != nil || string(got) != "through the socket" {
		t.Fatalf("read %q, %v", got, err)
	}
}

func TestWaitMigrationOutcomes(t *testing.T) {
	script := func(final string) func(c *fakeConn) {
		return func(c *fakeConn) {
			for _, st := range []string{`{}`, `{"status": "setup"}`, `{"status": "active"}`, final} {
				r, ok := c.expect("query-migrate")
				if !ok {
					return
				}
				c.reply(r, st)
			}
			c.drain()
		}
	}
	ctx := testCtx(t, 5*time.Second)
	m := dialFake(t, script(`{"status": "completed", "total-time": 9, "ram": {"transferred": 180477, "total": 67186688}}`))
	info, err := m.WaitMigration(ctx)
	if err != nil || info.Status != "completed" || info.TotalTimeMs != 9 || info.RAM.Transferred != 180477 {
		t.Fatalf("completed: %+v, %v", info, err)
	}
	m = dialFake(t, script(`{"status": "failed", "error-desc": "Unable to write to socket: Broken pipe"}`))
	_, err = m.WaitMigration(ctx)
	var me *MigrationError
	if !errors.As(err, &me) || me.Status != "failed" || !strings.Contains(me.Desc, "Broken pipe") {
		t.Fatalf("failed: %v", err)
	}
}

func TestMigrateOnlyAcceptsFDURIs(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		if r, err := c.read(); err == nil {
			t.Errorf("a %s command reached QEMU", r.Execute)
		}
	})
	ctx := testCtx(t, 5*time.Second)
	for _, uri := range []string{"exec:cat > /tmp/x", "tcp:1.2.3.4:5", "fd:", "file:/x"} {
		if err := m.Migrate(ctx, uri); err == nil || !strings.Contains(err.Error(), "only fd:") {
			t.Errorf("Migrate(%q) = %v", uri, err)
		}
		if err := m.MigrateIncoming(ctx, uri); err == nil {
			t.Errorf("MigrateIncoming(%q) accepted", uri)
		}
	}
}

func TestMigrationSetters(t *testing.T) {
	m := dialFake(t, func(c *fakeConn) {
		if r, ok := c.expect("migrate-set-capabilities"); ok {
			want := `{"capabilities":[{"capability":"events","state":false},{"capability":"x-ignore-shared","state":true}]}`
			if string(r.Arguments) != want {
				t.Errorf("capabilities args %s", r.Arguments)
			}
			c.reply(r, "{}")
		}
		if r, ok := c.expect("migrate-set-parameters"); ok {
			if string(r.Arguments) != `{"announce-rounds":0,"max-bandwidth":100000000000}` {
				t.Errorf("parameters args %s", r.Arguments)
			}
			c.reply(r, "{}")
		}
		c.drain()
	})
	ctx := testCtx(t, 5*time.Second)
	if err := m.SetMigrationCapabilities(ctx, map[string]bool{"x-ignore-shared": true, "events": false}); err != nil {
		t.Fatal(err)
	}
	err := m.SetMigrationParameters(ctx, map[string]any{"max-bandwidth": int64(100e9), "announce-rounds": 0})
	if err != nil {
		t.Fatal(err)
	}
}
