package e2b

// Unit tests of what keeps the API and proxy safe to expose: the headers
// a sandbox gets, the create limiter, the listeners' timeouts. None needs
// envtest.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// headerEcho is an upstream that answers with the headers it got.
func headerEcho(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(r.Header)
	}))
	t.Cleanup(up.Close)
	return up
}

// forwarded sends a request with hdr (name, value pairs) through the
// proxy's reverse proxy to an echoing upstream and returns the headers
// the upstream saw.
func forwarded(t *testing.T, hdr ...string) http.Header {
	t.Helper()
	up := headerEcho(t)
	u, _ := url.Parse(up.URL)
	p := newProxy(&Server{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, u)))
	}))
	t.Cleanup(front.Close)
	req, _ := http.NewRequest("GET", front.URL+"/files", nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got http.Header
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatalf("decode the upstream's answer: %v", err)
	}
	return got
}

func basic(userPass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(userPass))
}

// TestForwardedHeaders: the API's credentials and the client's network
// never reach a sandbox; its own token and other headers do.
func TestForwardedHeaders(t *testing.T) {
	got := forwarded(t, "X-API-KEY", "e2b_secret", "Cookie", "session=abc", "Proxy-Authorization", "Basic cHJveHk6cHc=",
		"X-Access-Token", "tok-sandbox", "X-Forwarded-For", "203.0.113.7", "X-Forwarded-Host", "api.example",
		"X-Forwarded-Proto", "https", "X-Forwarded-Port", "443", "Forwarded", "for=203.0.113.7", "X-Real-Ip", "203.0.113.7",
		"Connection", "X-Hop", "X-Hop", "1", "Authorization", "Bearer e2b_secret", "Connect-Protocol-Version", "1",
		"E2B-Traffic-Access-Token", "tok-traffic")
	for _, h := range []string{"X-Api-Key", "Cookie", "Proxy-Authorization", "Authorization", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Proto", "X-Forwarded-Port", "Forwarded", "X-Real-Ip", "X-Hop", "E2b-Traffic-Access-Token"} {
		if v, ok := got[h]; ok {
			t.Errorf("the sandbox got %s: %q", h, v)
		}
	}
	if v := got.Get("X-Access-Token"); v != "tok-sandbox" {
		t.Errorf("X-Access-Token %q, want the sandbox's token passed", v)
	}
	if v := got.Get("Connect-Protocol-Version"); v != "1" {
		t.Errorf("Connect-Protocol-Version %q, want other headers passed", v)
	}

}

// TestAuthorizationForwarded: envd's port gets Authorization only as
// envd reads it (a user, no password); a sandbox's own port gets its
// service's (an MCP gateway's bearer token, a web app's login) as sent;
// neither gets one carrying an API key or an access token.
func TestAuthorizationForwarded(t *testing.T) {
	const own = 50005
	tests := []struct {
		name, sent    string
		envd, service string
	}{
		{"envd's user, no password", basic("user:"), basic("user:"), basic("user:")},
		{"a password", basic("root:hunter2"), basic("root:"), basic("root:hunter2")},
		{"no user", basic(":hunter2"), "", basic(":hunter2")},
		{"not base64", "Basic !!!", "", "Basic !!!"},
		{"a service's bearer token", "Bearer 6f1c-token", "", "Bearer 6f1c-token"},
		{"an API key", "Bearer e2b_secret", "", ""},
		{"an access token", "Bearer sk_e2b_secret", "", ""},
		{"an API key as a password", basic("user:e2b_secret"), basic("user:"), basic("user:")},
	}
	for _, tc := range tests {
		for _, port := range []int{sandlotv1.EnvdPort, sandlotv1.CodeInterpreterPort, own} {
			h := http.Header{"Authorization": {tc.sent}}
			stripCredentials(h, port)
			want := tc.service
			if port != own {
				want = tc.envd
			}
			if got := h.Get("Authorization"); got != want {
				t.Errorf("%s to port %d: sent %q, the sandbox got %q, want %q", tc.name, port, tc.sent, got, want)
			}
		}
	}
}

// fakeClock is a limiter's time, moved by the test.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func wantWait(t *testing.T, got, want time.Duration) {
	t.Helper()
	if d := got - want; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("wait %v, want %v", got, want)
	}
}

func TestCreateLimiter(t *testing.T) {
	clock := newFakeClock()
	l := newCreateLimiter(1, 2, clock.now) // 1 a second, 2 at once
	take := func(key string, n int, wantOK bool) time.Duration {
		t.Helper()
		wait, ok := l.take(key, n)
		if ok != wantOK {
			t.Fatalf("take %d for %s: %v, want %v", n, key, ok, wantOK)
		}
		return wait
	}
	take("a", 1, true)
	take("a", 1, true)
	wantWait(t, take("a", 1, false), time.Second)
	take("b", 2, true) // another key has its own bucket
	clock.add(500 * time.Millisecond)
	wantWait(t, take("a", 1, false), 500*time.Millisecond)
	clock.add(500 * time.Millisecond)
	take("a", 1, true)

	// A fork of more than the burst waits for a full bucket, then owes.
	clock.add(time.Second)
	wantWait(t, take("a", 5, false), time.Second)
	clock.add(time.Second)
	take("a", 5, true)
	wantWait(t, take("a", 1, false), 4*time.Second)

	// Keys that stopped creating are forgotten once their bucket refilled.
	if n := l.size(); n != 2 {
		t.Fatalf("%d buckets, want a and b", n)
	}
	clock.add(sweepEvery)
	take("c", 1, true)
	if n := l.size(); n != 1 {
		t.Errorf("%d buckets after a sweep, want only c's", n)
	}
}

// TestCreateRateLimited: a create beyond the key's limit is a 429 with
// Retry-After and an E2B error, on every create route; it touches nothing
// in the cluster (the Server here has none).
func TestCreateRateLimited(t *testing.T) {
	s := New(Config{CreateRate: 0.01, CreateBurst: 1, Log: slog.New(slog.DiscardHandler)}, nil)
	clock := newFakeClock()
	s.creates.now = clock.now
	if _, ok := s.creates.take("e2b_key", 1); !ok {
		t.Fatal("the first create was limited")
	}
	for _, path := range []string{"/sandboxes", "/v2/sandboxes"} {
		t.Run(path, func(t *testing.T) {
			req := httptest.NewRequest("POST", path, strings.NewReader(`{"templateID":"base"}`))
			req.Header.Set("X-API-KEY", "e2b_key")
			rec := httptest.NewRecorder()
			s.mux.ServeHTTP(rec, req)
			r := reply{rec.Code, rec.Header(), rec.Body.Bytes()}
			r.wantError(t, http.StatusTooManyRequests, "rate limit")
			if ra := r.header.Get("Retry-After"); ra != "100" {
				t.Errorf("Retry-After %q, want 100 (seconds until one create at 0.01/s)", ra)
			}
		})
	}
	req := httptest.NewRequest("POST", "/v2/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("X-API-KEY", "e2b_key")
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("an invalid create: %d %s, want 400 before the limit is asked", rec.Code, rec.Body)
	}
}

// startListener serves a real Server (no cluster: only /health answers)
// with NewHTTPServer and timeouts to on a local port.
func startListener(t *testing.T, to Timeouts) string {
	t.Helper()
	srv := NewHTTPServer("", New(Config{Log: slog.New(slog.DiscardHandler)}, nil), to)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// readToClose reads conn until the server closes it; it fails when that
// does not happen within 5 s.
func readToClose(t *testing.T, conn net.Conn) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(5 * time.Second))
	data, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open 5 s (read %q)", data)
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v", err)
	}
	return string(data), time.Since(start)
}

// TestSlowLoris: a client that dribbles its headers a byte at a time is
// cut off at the read-header timeout, and an idle keep-alive connection
// at the idle timeout, while a prompt request is served.
func TestSlowLoris(t *testing.T) {
	const header, idle = 300 * time.Millisecond, 300 * time.Millisecond
	addr := startListener(t, Timeouts{ReadHeader: header, Idle: idle})

	t.Run("dribbled headers", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stop := make(chan struct{})
		defer close(stop)
		go func() { // a byte every 10 ms, never a whole header block
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			msg := "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1<<12)
			for i := 0; i < len(msg); i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := conn.Write([]byte{msg[i]}); err != nil {
					return
				}
			}
		}()
		data, took := readToClose(t, conn)
		if strings.Contains(data, "200 OK") || took < header-50*time.Millisecond {
			t.Errorf("after %v the server answered %q, want the connection closed after %v", took, data, header)
		}
	})

	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		data, took := readToClose(t, conn)
		if !strings.HasPrefix(data, "HTTP/1.1 200 OK") || took < idle-50*time.Millisecond {
			t.Errorf("after %v: %q, want a 200, then the connection closed after %v idle", took, data, idle)
		}
	})
}

// TestBodyDone: the REST API's read deadline moves to the call's end when
// the body ends, not when it is cut short.
func TestBodyDone(t *testing.T) {
	calls := 0
	b := &bodyDone{ReadCloser: io.NopCloser(strings.NewReader("ab")), done: func() { calls++ }}
	buf := make([]byte, 1)
	for range 2 {
		_, _ = b.Read(buf)
	}
	_ = b.Close()
	if calls != 0 {
		t.Fatalf("done called %d times before EOF", calls)
	}
	for range 2 {
		if _, err := b.Read(buf); !errors.Is(err, io.EOF) {
			t.Fatalf("read: %v, want EOF", err)
		}
	}
	if calls != 1 {
		t.Errorf("done called %d times, want once at EOF", calls)
	}
}
