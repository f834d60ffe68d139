package httpserve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// short are the bounds the tests inject; margin is how late past one the
// server may close (a loaded 2-core CI machine).
var short = Timeouts{ReadHeader: 200 * time.Millisecond, Idle: 300 * time.Millisecond}

const margin = 2 * time.Second

// start serves h with the real constructor on a loopback port.
func start(t *testing.T, h http.Handler, to Timeouts) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewWithTimeouts(ln.Addr().String(), h, to)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// awaitClose reads r until the server closes the connection, failing if
// that takes longer than within; it returns what was read and how long
// the close took.
func awaitClose(t *testing.T, c net.Conn, r io.Reader, within time.Duration) (string, time.Duration) {
	t.Helper()
	t0 := time.Now()
	if err := c.SetReadDeadline(t0.Add(within)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	took := time.Since(t0)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server kept the connection open for %v (read %q)", within, b)
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v", err)
	}
	return string(b), took
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

// TestSlowLoris: a client sending its headers a byte at a time is cut at
// the read-header timeout, dripping bytes does not extend it, and its
// request never reaches the handler (net/http answers a bare 400).
func TestSlowLoris(t *testing.T) {
	c := dial(t, start(t, http.HandlerFunc(ok), short))
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	go func() { // the drip ends when the server closes
		for _, b := range []byte(strings.Repeat("X-Slow: loris\r\n", 100)) {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	got, took := awaitClose(t, c, c, short.ReadHeader+margin)
	if got != "" && !strings.HasPrefix(got, "HTTP/1.1 400 ") {
		t.Errorf("a client that never finished its headers got %q", got)
	}
	if took < short.ReadHeader*3/4 {
		t.Errorf("closed after %v, before the %v read-header timeout", took, short.ReadHeader)
	}
}

// TestSilentConnection: a connection that never sends a byte is closed
// at the read-header timeout too.
func TestSilentConnection(t *testing.T) {
	c := dial(t, start(t, http.HandlerFunc(ok), short))
	awaitClose(t, c, c, short.ReadHeader+margin)
}

// TestIdleKeepAlive: after a reply, a kept-alive connection that sends no
// next request is closed after the idle timeout.
func TestIdleKeepAlive(t *testing.T) {
	c := dial(t, start(t, http.HandlerFunc(ok), short))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" || resp.Close {
		t.Fatalf("reply %q (close %v), want a kept-alive ok", body, resp.Close)
	}
	_, took := awaitClose(t, c, br, short.Idle+margin)
	if took < short.Idle*3/4 {
		t.Errorf("idle connection closed after %v, before the %v idle timeout", took, short.Idle)
	}
}

// TestLongStreamNotCut: a streamed reply lasting several times every
// timeout arrives whole (there is no server-wide read or write timeout),
// and its request context stays alive.
func TestLongStreamNotCut(t *testing.T) {
	const chunks = 8
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for i := range chunks {
			if r.Context().Err() != nil {
				return
			}
			fmt.Fprintf(w, "%d\n", i)
			_ = rc.Flush()
			time.Sleep(short.Idle / 2)
		}
	})
	resp, err := http.Get("http://" + start(t, stream, short))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("stream cut after %q: %v", body, err)
	}
	if n := strings.Count(string(body), "\n"); n != chunks {
		t.Fatalf("got %d of %d chunks: %q", n, chunks, body)
	}
}

// TestRefuseCutsSlowBody: a refused caller announcing a body it never
// sends gets its reply at once and loses the connection after
// RefusedBodyGrace, instead of holding it while net/http drains.
func TestRefuseCutsSlowBody(t *testing.T) {
	refuse := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		Refuse(w)
		http.Error(w, "no", http.StatusUnauthorized)
	})
	c := dial(t, start(t, refuse, DefaultTimeouts))
	if _, err := io.WriteString(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(margin))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("status %d, close %v: want 401 and Connection: close", resp.StatusCode, resp.Close)
	}
	awaitClose(t, c, br, RefusedBodyGrace+margin)
}

// TestDeadlineBoundsSlowBody: a non-streaming handler under Deadline
// stops waiting for a body that does not come.
func TestDeadlineBoundsSlowBody(t *testing.T) {
	const d = 200 * time.Millisecond
	readErr := make(chan error, 1)
	h := Deadline(d, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}))
	c := dial(t, start(t, h, DefaultTimeouts))
	if _, err := io.WriteString(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("body read ended with %v, want a timeout", err)
		}
	case <-time.After(d + margin):
		t.Fatalf("the handler still waits for the body after %v", d+margin)
	}
}
