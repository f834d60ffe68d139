package e2b

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// echoed is what the test pod saw of a request.
type echoed struct {
	Method, Path, Query, Body, Host, Token string
}

// testPod stands in for a sandbox's pod: /stream sends its headers, then
// three flushed chunks, each once the test asks for it on next; anything
// else echoes.
type testPod struct {
	*httptest.Server
	hits atomic.Int32
	next chan struct{}
}

func newTestPod(t *testing.T) *testPod {
	p := &testPod{next: make(chan struct{})}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		if r.URL.Path == "/early" {
			answerEarly(w, r)
			return
		}
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for i := range 3 {
				select {
				case <-p.next:
				case <-r.Context().Done():
					return
				}
				fmt.Fprintf(w, "{\"chunk\":%d}\n", i)
				w.(http.Flusher).Flush()
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.NewEncoder(w).Encode(echoed{r.Method, r.URL.Path, r.URL.RawQuery, string(body), r.Host, r.Header.Get("X-Access-Token")})
	}))
	t.Cleanup(p.Close)
	return p
}

// answerEarly sends its head and a first line before it reads the
// request body, then says how much body it got.
func answerEarly(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).EnableFullDuplex()
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "early\n")
	w.(http.Flusher).Flush()
	n, err := io.Copy(io.Discard, r.Body)
	fmt.Fprintf(w, "read %d %v\n", n, err)
}

// TestProxy: sandbox traffic, named by headers or host name, reaches the
// sandbox's pod with its token, streams, and is refused otherwise.
// Longer than 60 lines: a table of routes and the checks they share.
func TestProxy(t *testing.T) {
	f := setup(t)
	t.Parallel()
	pod := newTestPod(t)
	addr := pod.Listener.Addr().String()
	id, token := f.readySandbox(t, addr, nil)
	_, otherToken := f.readySandbox(t, addr, nil)
	pausedID, pausedToken := f.readySandbox(t, addr, func(s *sandlotv1.Sandbox) { s.Spec.Paused = true })
	host := func(port int, id string) string { return fmt.Sprintf("%d-%s.%s", port, id, testDomain) }
	byHeader := func(id string, port int) []string {
		return []string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", fmt.Sprint(port)}
	}

	t.Run("forwarded", func(t *testing.T) {
		tests := []struct {
			name        string
			hdr         []string // routing
			host, token string   // sent
		}{
			{"by headers", byHeader(id, sandlotv1.EnvdPort), strings.TrimPrefix(f.url, "http://"), token},
			{"by host name", nil, host(sandlotv1.EnvdPort, id), token},
			{"public port without token", nil, host(8080, id), ""},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				hdr := append([]string{"Host", tc.host}, tc.hdr...)
				if tc.token != "" {
					hdr = append(hdr, "X-Access-Token", tc.token)
				}
				r := call(t, f.url, "POST", "/files?path=%2Fhome%2Fuser%2Fa.txt", "hello sandbox", hdr...)
				got := decode[echoed](t, r, http.StatusOK)
				want := echoed{Method: "POST", Path: "/files", Query: "path=%2Fhome%2Fuser%2Fa.txt", Body: "hello sandbox",
					Host: tc.host, Token: tc.token}
				if got != want {
					t.Errorf("the pod saw %+v, want %+v", got, want)
				}
			})
		}
	})

	t.Run("streamed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", f.url+"/stream", nil)
		req.Host = host(sandlotv1.EnvdPort, id)
		req.Header.Set("X-Access-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("got %s %q", resp.Status, resp.Header.Get("Content-Type"))
		}
		rd := bufio.NewReader(resp.Body)
		for i := range 3 {
			// The pod writes chunk i only now, and chunk i+1 only after
			// this read: a buffering proxy fails here with the deadline.
			select {
			case pod.next <- struct{}{}:
			case <-ctx.Done():
				t.Fatalf("the pod never asked for chunk %d", i)
			}
			line, err := rd.ReadString('\n')
			if want := fmt.Sprintf("{\"chunk\":%d}\n", i); err != nil || line != want {
				t.Fatalf("chunk %d: %q, %v; want %q", i, line, err, want)
			}
		}
		if rest, err := io.ReadAll(rd); err != nil || len(rest) != 0 {
			t.Errorf("after the chunks: %q, %v", rest, err)
		}
	})

	t.Run("answered before the body was sent", func(t *testing.T) {
		// The client sends the rest of its body only once the head is
		// back: a proxy that reads or closes the rest of the body before
		// it forwards the head would stall or cut the reply.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pr, pw := io.Pipe()
		defer context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })()
		req, _ := http.NewRequestWithContext(ctx, "POST", f.url+"/early", pr)
		req.Host = host(sandlotv1.EnvdPort, id)
		req.Header.Set("X-Access-Token", token)
		go func() { _, _ = pw.Write([]byte(strings.Repeat("a", 1000))) }()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		if line, err := rd.ReadString('\n'); err != nil || line != "early\n" {
			t.Fatalf("first line %q, %v", line, err)
		}
		_, _ = pw.Write([]byte(strings.Repeat("b", 1000)))
		pw.Close()
		if rest, err := io.ReadAll(rd); err != nil || string(rest) != "read 2000 <nil>\n" {
			t.Errorf("after the first line: %q, %v; want the pod to have read the whole body", rest, err)
		}
	})

	t.Run("refused", func(t *testing.T) {
		hits := pod.hits.Load()
		tests := []struct {
			name string
			hdr  []string
			code int
			msg  string
		}{
			{"no token", byHeader(id, sandlotv1.EnvdPort), 401, "X-Access-Token"},
			{"wrong token", append(byHeader(id, sandlotv1.EnvdPort), "X-Access-Token", "tok-wrong"), 401, "X-Access-Token"},
			{"another sandbox's token", []string{"Host", host(sandlotv1.EnvdPort, id), "X-Access-Token", otherToken}, 401, "X-Access-Token"},
			{"interpreter port needs the token", []string{"Host", host(sandlotv1.CodeInterpreterPort, id)}, 401, "X-Access-Token"},
			{"unknown sandbox", append(byHeader(unknownID, sandlotv1.EnvdPort), "X-Access-Token", token), 502, "not found"},
			{"paused without autoResume", append(byHeader(pausedID, sandlotv1.EnvdPort), "X-Access-Token", pausedToken), 502, "is paused"},
			{"nothing listens on the port", []string{"Host", host(3000, id)}, 502, "sandbox unreachable"},
			{"another domain is API traffic", []string{"Host", fmt.Sprintf("%d-%s.example.com", sandlotv1.EnvdPort, id), "X-Access-Token", token}, 401, "missing X-API-KEY"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				call(t, f.url, "GET", "/files", nil, tc.hdr...).wantError(t, tc.code, tc.msg)
			})
		}
		if n := pod.hits.Load(); n != hits {
			t.Errorf("refused requests reached the pod %d times", n-hits)
		}
	})
}

// TestContextRoutesTakeTheTrafficToken: the interpreter's context routes
// (the code-interpreter SDK sends them only E2B-Traffic-Access-Token) go
// on to the pod with the sandbox's envd token when they carry the
// sandbox's traffic token; another sandbox's traffic token, or the traffic
// token on /execute or on envd's port, opens nothing.
func TestContextRoutesTakeTheTrafficToken(t *testing.T) {
	f := setup(t)
	t.Parallel()
	pod := newTestPod(t)
	addr := pod.Listener.Addr().String()
	id, token := f.readySandbox(t, addr, nil)
	_, otherToken := f.readySandbox(t, addr, nil)
	host := func(port int) string { return fmt.Sprintf("%d-%s.%s", port, id, testDomain) }
	traffic, otherTraffic := trafficToken(token), trafficToken(otherToken)
	for _, path := range []string{"/contexts", "/contexts/abc/restart"} {
		r := call(t, f.url, "POST", path, "{}", "Host", host(sandlotv1.CodeInterpreterPort), trafficTokenHeader, traffic)
		if got := decode[echoed](t, r, http.StatusOK); got.Path != path || got.Token != token {
			t.Errorf("%s: the pod saw %+v, want the path with the sandbox's envd token", path, got)
		}
	}
	hits := pod.hits.Load()
	for _, tc := range []struct {
		name, path string
		port       int
		traffic    string
	}{
		{"another sandbox's traffic token", "/contexts", sandlotv1.CodeInterpreterPort, otherTraffic},
		{"the traffic token on /execute", "/execute", sandlotv1.CodeInterpreterPort, traffic},
		{"the traffic token on envd", "/contexts", sandlotv1.EnvdPort, traffic},
		{"a look-alike path", "/contextsx", sandlotv1.CodeInterpreterPort, traffic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call(t, f.url, "POST", tc.path, "{}", "Host", host(tc.port), trafficTokenHeader, tc.traffic).wantError(t, 401, "X-Access-Token")
		})
	}
	if n := pod.hits.Load(); n != hits {
		t.Errorf("refused requests reached the pod %d times", n-hits)
	}
}

// TestProxyHoldsWhileMoving: traffic to a sandbox a drain is moving
// (paused on its old node) waits, then reaches it on its new node, and
// the API calls it running meanwhile.
func TestProxyHoldsWhileMoving(t *testing.T) {
	f := setup(t)
	t.Parallel()
	addr := newTestPod(t).Listener.Addr().String()
	sbx := f.makeSandbox(t, func(s *sandlotv1.Sandbox) {
		s.Annotations = map[string]string{sandlotv1.AnnotationMoveFrom: "node-1"}
	})
	token := f.createToken(t, sbx)
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
		t.Fatal(err)
	}
	sbx.Status.Phase = sandlotv1.SandboxPaused
	if err := f.c.Status().Update(context.Background(), sbx); err != nil {
		t.Fatal(err)
	}
	if err := waitCached(f.kube, sbx); err != nil {
		t.Fatal(err)
	}
	if paused(sbx) || state(sbx) != "running" {
		t.Errorf("a moving sandbox is %q to its clients, want running", state(sbx))
	}
	id := sandlotv1.SandboxIDFor(sbx.UID)
	done := make(chan reply, 1)
	go func() {
		r, err := send(f.url, "POST", "/files?path=%2Fa", "moved", "Host", fmt.Sprintf("%d-%s.%s", sandlotv1.EnvdPort, id, testDomain),
			"X-Access-Token", token)
		if err != nil {
			t.Errorf("POST /files: %v", err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("answered %d while the sandbox was moving", r.code)
	case <-time.After(time.Second):
	}
	f.setRunning(t, sbx, newPodIP(addr, sandlotv1.EnvdPort))
	select {
	case r := <-done:
		if got := decode[echoed](t, r, http.StatusOK); got.Body != "moved" {
			t.Errorf("the moved sandbox's pod saw %+v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request never reached the moved sandbox")
	}
}
