package e2b

// The envtest fixture: a real kube-apiserver and etcd, one Server over
// namespace "default" behind httptest. No controller runs: the tests play
// the controller and node agent (Sandbox status, token Secrets), and a
// dial hook on the proxy maps pod IPs onto test listeners.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/kube"
)

const (
	testNS      = "default"
	testDomain  = "sandlot.test:8443"
	defaultTpl  = "python-base" // Config.DefaultTemplate, a Template object
	maxTestBody = 64 << 10      // Config.MaxBodyBytes of the fixture's server
)

// fixture is the package's shared API server, cache and E2B server.
type fixture struct {
	env  *kube.Env
	c    client.Client // direct to the API server: the test's own view
	kube *Kube         // the server's cache
	srv  *Server
	url  string
	key  string // a valid API key
	stop func()
}

var (
	fxOnce sync.Once
	fx     *fixture
	fxErr  error
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if fx != nil {
		fx.stop()
	}
	os.Exit(code)
}

// setup starts the fixture once for the package (unit and fuzz tests
// never call it, so they run without envtest).
func setup(t *testing.T) *fixture {
	t.Helper()
	fxOnce.Do(func() { fx, fxErr = startFixture() })
	if fxErr != nil {
		t.Fatal(fxErr)
	}
	return fx
}

func startFixture() (*fixture, error) {
	env, err := kube.Start()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &fixture{env: env, c: env.Client}
	f.stop = func() { cancel(); _ = env.Stop() }
	fail := func(err error) (*fixture, error) { f.stop(); return nil, err }
	// The API runs as the chart's sandlot-api service account, never admin.
	cfg, err := env.ComponentConfig("sandlot-api")
	if err != nil {
		return fail(err)
	}
	if f.kube, err = NewKube(ctx, cfg, testNS); err != nil {
		return fail(err)
	}
	if f.key, err = NewAPIKey(); err != nil {
		return fail(err)
	}
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sandlot-api-keys", Namespace: testNS},
		StringData: map[string]string{"ci": f.key}}
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: defaultTpl, Namespace: testNS},
		Spec: sandlotv1.TemplateSpec{Image: "registry.example/python:3.12"}}
	for _, o := range []client.Object{keys, tpl} {
		if err := f.c.Create(ctx, o); err != nil {
			return fail(err)
		}
		if err := waitCached(f.kube, o); err != nil {
			return fail(err)
		}
	}
	var hs *httptest.Server
	f.srv, hs = newTestServer(f.kube, Config{MaxBodyBytes: maxTestBody})
	f.url = hs.URL
	stopEnv := f.stop
	f.stop = func() { hs.Close(); stopEnv() }
	return f, nil
}

// newTestServer is a Server as the fixture configures it (cfg adds to
// that), its proxy dialing the test's pods.
func newTestServer(k *Kube, cfg Config) (*Server, *httptest.Server) {
	cfg.Namespace, cfg.DefaultTemplate, cfg.Domain = testNS, defaultTpl, testDomain
	cfg.Log = slog.New(slog.DiscardHandler)
	if os.Getenv("SANDLOT_TEST_LOG") != "" {
		cfg.Log = slog.Default()
	}
	s := New(cfg, k)
	s.proxy.dial = dialPod
	return s, httptest.NewServer(s)
}

func waitCached(k *Kube, o client.Object) error {
	return poll.Within(10*time.Second, fmt.Sprintf("%T %s in the server's cache", o, o.GetName()), func() error {
		return k.Get(context.Background(), client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object))
	})
}

// pods maps "podIP:port" to the address of the listener standing in for it.
var (
	pods    sync.Map
	lastPod atomic.Int32
)

func dialPod(ctx context.Context, network, addr string) (net.Conn, error) {
	to, ok := pods.Load(addr)
	if !ok {
		return nil, fmt.Errorf("dial %s: no test pod listens there", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to.(string))
}

// newPodIP draws a pod IP whose ports go to listener (host:port) when listed.
func newPodIP(listener string, ports ...int) string {
	n := lastPod.Add(1)
	ip := fmt.Sprintf("10.0.%d.%d", n/250, n%250+1)
	for _, p := range ports {
		pods.Store(fmt.Sprintf("%s:%d", ip, p), listener)
	}
	return ip
}

// reply is an HTTP answer, read whole.
type reply struct {
	code   int
	header http.Header
	body   []byte
}

// send makes one request to base+path: body is sent as is when a string,
// JSON-encoded otherwise (nil: none); hdr are name, value pairs ("Host"
// sets the host name). Safe off the test's goroutine.
func send(base, method, path string, body any, hdr ...string) (reply, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		rd = bytes.NewReader(mustJSON(b))
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		return reply{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, data}, err
}

func call(t *testing.T, base, method, path string, body any, hdr ...string) reply {
	t.Helper()
	r, err := send(base, method, path, body, hdr...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// api calls the fixture's API with its key.
func (f *fixture) api(t *testing.T, method, path string, body any) reply {
	t.Helper()
	return call(t, f.url, method, path, body, "X-API-KEY", f.key)
}

// createAsync POSTs /v2/sandboxes to base; the answer comes on the channel.
func (f *fixture) createAsync(t *testing.T, base string, body any) <-chan reply {
	ch := make(chan reply, 1)
	go func() {
		r, err := send(base, "POST", "/v2/sandboxes", body, "X-API-KEY", f.key)
		if err != nil {
			t.Errorf("POST /v2/sandboxes: %v", err)
		}
		ch <- r
	}()
	return ch
}

func receive(t *testing.T, ch <-chan reply, within time.Duration) reply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no answer within %v", within)
		return reply{}
	}
}

// pending fails if ch answers within d.
func pending(t *testing.T, ch <-chan reply, d time.Duration, why string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("answered %d %s before %s", r.code, r.body, why)
	case <-time.After(d):
	}
}

// wantError checks an E2B error answer: status code, a JSON {code,
// message} with code == status and message containing substr.
func (r reply) wantError(t *testing.T, code int, substr string) {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.body, &e); r.code != code || err != nil {
		t.Fatalf("got %d %q, want %d with a JSON error", r.code, r.body, code)
	}
	if e.Code != code || !strings.Contains(e.Message, substr) || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("got %d %+v (%s), want code %d, a message containing %q", r.code, e, r.header.Get("Content-Type"), code, substr)
	}
}

// decode checks the status code and decodes the JSON body.
func decode[T any](t *testing.T, r reply, code int) T {
	t.Helper()
	var v T
	if r.code != code {
		t.Fatalf("got %d %s, want %d", r.code, r.body, code)
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

// makeSandbox creates a Sandbox of the default template (as a kubectl
// user would), changed by mutate, and waits until the server sees it.
func (f *fixture) makeSandbox(t *testing.T, mutate func(*sandlotv1.Sandbox)) *sandlotv1.Sandbox {
	t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-", Namespace: testNS},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: defaultTpl}}}
	if mutate != nil {
		mutate(sbx)
	}
	if err := f.c.Create(context.Background(), sbx); err != nil {
		t.Fatal(err)
	}
	if err := waitCached(f.kube, sbx); err != nil {
		t.Fatal(err)
	}
	return sbx
}

// created waits for the Sandbox the server made for a request whose
// metadata "test" is mark.
func (f *fixture) created(t *testing.T, mark string) *sandlotv1.Sandbox {
	t.Helper()
	var found *sandlotv1.Sandbox
	poll.Eventually(t, 10*time.Second, "the server creates the Sandbox", func() error {
		list := &sandlotv1.SandboxList{}
		if err := f.c.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if list.Items[i].Spec.Metadata["test"] == mark {
				found = &list.Items[i]
			}
		}
		if found == nil {
			return fmt.Errorf("none of the %d sandboxes has metadata test=%s", len(list.Items), mark)
		}
		return nil
	})
	return found
}

// setRunning plays the controller and node agent: the sandbox runs at
// podIP and its VM is ready for its current generation.
func (f *fixture) setRunning(t *testing.T, sbx *sandlotv1.Sandbox, podIP string) {
	t.Helper()
	ctx := context.Background()
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(sbx), sbx); err != nil {
		t.Fatal(err)
	}
	sbx.Status.Phase, sbx.Status.PodIP = sandlotv1.SandboxRunning, podIP
	sbx.Status.Resources = &sandlotv1.Resources{VCPU: 2, MemoryMiB: 1024}
	meta.SetStatusCondition(&sbx.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionVMReady,
		Status: metav1.ConditionTrue, ObservedGeneration: sbx.Generation, Reason: "Restored", Message: "envd answers"})
	if err := f.c.Status().Update(ctx, sbx); err != nil {
		t.Fatal(err)
	}
}

// createToken makes the sandbox's envd token Secret and returns the token.
func (f *fixture) createToken(t *testing.T, sbx *sandlotv1.Sandbox) string {
	t.Helper()
	tok := "tok-" + randomID()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.TokenSecretName(sbx.Name), Namespace: testNS},
		Data: map[string][]byte{sandlotv1.TokenSecretKey: []byte(tok)}}
	if err := f.c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return tok
}

// readySandbox is a running sandbox whose envd (and interpreter, port 8080) is
// listener, once the server sees it ready; it returns its ID and token.
func (f *fixture) readySandbox(t *testing.T, listener string, mutate func(*sandlotv1.Sandbox)) (id, token string) {
	t.Helper()
	sbx := f.makeSandbox(t, mutate)
	f.setRunning(t, sbx, newPodIP(listener, sandlotv1.EnvdPort, sandlotv1.CodeInterpreterPort, 8080))
	token = f.createToken(t, sbx)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.srv.waitUsable(ctx, sbx.Namespace, sbx.Name, sbx.Generation); err != nil {
		t.Fatalf("the server never saw the sandbox ready: %v", err)
	}
	return sandlotv1.SandboxIDFor(sbx.UID), token
}
