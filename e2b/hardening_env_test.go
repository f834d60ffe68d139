package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// TestProxyCredentials: through the whole server, a sandbox gets its own
// token but not the API key, a bearer token or cookies.
func TestProxyCredentials(t *testing.T) {
	f := setup(t)
	t.Parallel()
	up := headerEcho(t)
	id, token := f.readySandbox(t, up.Listener.Addr().String(), nil)
	r := call(t, f.url, "GET", "/files", nil, "Host", fmt.Sprintf("%d-%s.%s", sandlotv1.EnvdPort, id, testDomain),
		"X-Access-Token", token, "X-API-KEY", f.key, "Authorization", "Bearer "+f.key, "Cookie", "k="+f.key)
	var got http.Header
	if r.code != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("got %d %s", r.code, r.body)
	}
	if got.Get("X-Access-Token") != token || got.Get("X-Api-Key") != "" || got.Get("Authorization") != "" || got.Get("Cookie") != "" {
		t.Errorf("the sandbox got %v, want its token and no API credentials", got)
	}
}

// pausedAutoResume is a paused sandbox created with autoResume (its
// traffic private when private) whose envd and port 8080 are listener;
// it returns the Sandbox and its token.
func (f *fixture) pausedAutoResume(t *testing.T, listener string, private bool) (*sandlotv1.Sandbox, string) {
	t.Helper()
	sbx := f.makeSandbox(t, func(s *sandlotv1.Sandbox) {
		s.Spec.Paused = true
		s.Annotations = map[string]string{AnnotationAutoResume: "true"}
		if private {
			s.Annotations[AnnotationPrivateTraffic] = "true"
		}
	})
	f.setRunning(t, sbx, newPodIP(listener, sandlotv1.EnvdPort, 8080))
	token := f.createToken(t, sbx)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.srv.waitUsable(ctx, sbx.Namespace, sbx.Name, sbx.Generation); err != nil {
		t.Fatalf("the server never saw the sandbox: %v", err)
	}
	return sbx, token
}

// TestProxyAutoResume: as on E2B, a request that reaches a port of a
// paused autoResume sandbox wakes it — on a public port any request,
// whose answer then comes from the VM; refused ones (envd without its
// token, a private sandbox's port without the traffic token) do not wake
// it and never reach the pod.
func TestProxyAutoResume(t *testing.T) {
	f := setup(t)
	t.Parallel()
	pod := newTestPod(t)
	sbx, _ := f.pausedAutoResume(t, pod.Listener.Addr().String(), false)
	private, _ := f.pausedAutoResume(t, pod.Listener.Addr().String(), true)
	host := func(s *sandlotv1.Sandbox, port int) string {
		return fmt.Sprintf("%d-%s.%s", port, sandlotv1.SandboxIDFor(s.UID), testDomain)
	}
	for _, tc := range []struct {
		name string
		sbx  *sandlotv1.Sandbox
		hdr  []string
		msg  string
	}{
		{"envd port, wrong token", sbx, []string{"Host", host(sbx, sandlotv1.EnvdPort), "X-Access-Token", "tok-wrong"}, "X-Access-Token"},
		{"envd port, no token", sbx, []string{"Host", host(sbx, sandlotv1.EnvdPort)}, "X-Access-Token"},
		{"private traffic, no traffic token", private, []string{"Host", host(private, 8080)}, "E2B-Traffic-Access-Token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call(t, f.url, "GET", "/files", nil, tc.hdr...).wantError(t, http.StatusUnauthorized, tc.msg)
			cur := &sandlotv1.Sandbox{}
			if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(tc.sbx), cur); err != nil || !cur.Spec.Paused {
				t.Fatalf("the sandbox was resumed (%v)", err)
			}
		})
	}
	if n := pod.hits.Load(); n != 0 {
		t.Fatalf("refused requests reached the pod %d times", n)
	}
	t.Run("a public port, no token", func(t *testing.T) {
		ch := make(chan reply, 1)
		go func() {
			r, err := send(f.url, "GET", "/files", nil, "Host", host(sbx, 8080))
			if err != nil {
				t.Errorf("GET: %v", err)
			}
			ch <- r
		}()
		poll.Eventually(t, 10*time.Second, "the server resumes the sandbox", func() error {
			if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
				return err
			}
			if sbx.Spec.Paused {
				return fmt.Errorf("spec.paused still true")
			}
			return nil
		})
		f.setRunning(t, sbx, sbx.Status.PodIP) // the controller's part: the VM is back
		if got := decode[echoed](t, receive(t, ch, 10*time.Second), http.StatusOK); got.Path != "/files" {
			t.Errorf("the pod saw %+v", got)
		}
	})
}

// TestCreateRateLimit: through the whole server (the key checked first),
// a key's second create within its limit is a 429 with Retry-After.
func TestCreateRateLimit(t *testing.T) {
	f := setup(t)
	t.Parallel()
	_, hs := newTestServer(f.kube, Config{CreateRate: 0.01, CreateBurst: 1})
	t.Cleanup(hs.Close)
	body := `{"templateID":"no-such-template"}`
	call(t, hs.URL, "POST", "/v2/sandboxes", body, "X-API-KEY", f.key).wantError(t, http.StatusNotFound, "not found")
	r := call(t, hs.URL, "POST", "/sandboxes", body, "X-API-KEY", f.key)
	r.wantError(t, http.StatusTooManyRequests, "rate limit")
	if ra := r.header.Get("Retry-After"); ra != "100" && ra != "99" {
		t.Errorf("Retry-After %q, want about 100 seconds", ra)
	}
	call(t, hs.URL, "POST", "/sandboxes", body, "X-API-KEY", "e2b_wrong").wantError(t, http.StatusUnauthorized, "invalid API key")
	if r := f.api(t, "POST", "/v2/sandboxes", body); r.code != http.StatusNotFound {
		t.Errorf("the fixture's unlimited server: %d %s, want 404", r.code, r.body)
	}
}

// TestOperationRateLimit: a team's snapshots, pauses, resumes and builds
// beyond its burst are a 429 with Retry-After naming the limit; a request
// for a sandbox that does not exist is a 404 and charges nothing.
func TestOperationRateLimit(t *testing.T) {
	f := setup(t)
	t.Parallel()
	srv, hs := newTestServer(f.kube, Config{OperationRate: 0.01, OperationBurst: 1})
	t.Cleanup(hs.Close)
	for _, path := range []string{"/sandboxes/nosuch/pause", "/sandboxes/nosuch/resume", "/sandboxes/nosuch/snapshots"} {
		call(t, hs.URL, "POST", path, `{}`, "X-API-KEY", f.key).wantError(t, http.StatusNotFound, "")
	}
	if _, ok := srv.operations.take(testNS, 1); !ok {
		t.Fatal("the 404s above were charged to the team")
	}
	build := "/v2/templates/ratelimited/builds/0123456789abcdef-1x512"
	r := call(t, hs.URL, "POST", build, `{}`, "X-API-KEY", f.key)
	r.wantError(t, http.StatusTooManyRequests, "--operation-rate")
	if ra := r.header.Get("Retry-After"); ra != "100" && ra != "99" {
		t.Errorf("Retry-After %q, want about 100 seconds", ra)
	}
}
