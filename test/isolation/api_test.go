package isolation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// echoServer answers every request on :8000 with the headers it received.
const echoServer = `nohup python3 -c '
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = str(self.headers).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
http.server.HTTPServer(("0.0.0.0", 8000), H).serve_forever()
' >/dev/null 2>&1 &`

// TestAPIForwardsNoCredentials: a request through sandlot-api's proxy
// carrying the API key, a bearer token and cookies reaches a server in the
// sandbox without any of them; a slow-loris client is cut off.
func TestAPIForwardsNoCredentials(t *testing.T) {
	k := sbxtest.Client(t, c)
	isoTemplate(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	api, key := sbxtest.APIAccess(t, c)
	sbx := createThroughAPI(t, ctx, api, key)
	if out := sbxtest.EnvdRun(t, k, sandboxCR(t, k, sbx.SandboxID), echoServer+" echo started"); !strings.Contains(out, "started") {
		t.Fatalf("start the echo server: %q", out)
	}
	var seen string
	poll.Eventually(t, time.Minute, "the echo server in the sandbox answering through the proxy", func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+"/", nil)
		proxied(req, sbx, 8000)
		req.Header.Set("X-API-KEY", key)
		req.Header.Set("Authorization", "Bearer "+key)
		req.AddCookie(&http.Cookie{Name: "session", Value: "secret-cookie"})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", resp.Status, b)
		}
		seen = string(b)
		return nil
	})
	for _, secret := range []string{key, "secret-cookie", "X-Api-Key", "Bearer"} {
		if strings.Contains(strings.ToLower(seen), strings.ToLower(secret)) {
			t.Fatalf("the sandbox received %q: headers it saw:\n%s", secret, seen)
		}
	}
	slowLoris(t, strings.TrimPrefix(api, "http://"))
}

// sandbox is what POST /sandboxes answers.
type sandbox struct {
	SandboxID       string `json:"sandboxID"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

func createThroughAPI(t *testing.T, ctx context.Context, api, key string) sandbox {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api+"/sandboxes", bytes.NewReader([]byte(`{"templateID":"iso","timeout":600}`)))
	req.Header.Set("X-API-KEY", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s sandbox
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &s) != nil || s.SandboxID == "" {
		t.Fatalf("create through the API: %s: %s", resp.Status, b)
	}
	t.Cleanup(func() {
		del, _ := http.NewRequest(http.MethodDelete, api+"/sandboxes/"+s.SandboxID, nil)
		del.Header.Set("X-API-KEY", key)
		if resp, err := http.DefaultClient.Do(del); err == nil {
			resp.Body.Close()
		}
	})
	return s
}

// sandboxCR is the Sandbox of an E2B sandbox ID.
func sandboxCR(t *testing.T, k client.Client, id string) *sandlotv1.Sandbox {
	t.Helper()
	var list sandlotv1.SandboxList
	var found *sandlotv1.Sandbox
	poll.Eventually(t, 3*time.Minute, "sandbox "+id+" Running", func() error {
		if err := k.List(context.Background(), &list, client.InNamespace("default")); err != nil {
			return err
		}
		for i := range list.Items {
			if s := &list.Items[i]; s.Status.SandboxID == id && s.Status.Phase == sandlotv1.SandboxRunning && s.Status.PodIP != "" {
				found = s
				return nil
			}
		}
		return fmt.Errorf("no Running sandbox with ID %s", id)
	})
	return found
}

// proxied addresses req to a sandbox port through the proxy's headers
// (the SDK's E2B_SANDBOX_URL mode), with the sandbox's token.
func proxied(req *http.Request, s sandbox, port int) {
	req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", fmt.Sprint(port))
	req.Header.Set("X-Access-Token", s.EnvdAccessToken)
}

// slowLoris dribbles a request's headers a byte a second: the API closes
// the connection after its read-header timeout (10 s), well before the
// headers could end.
func slowLoris(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A byte a second: all of them would take ~18 minutes. The server's
	// read-header timeout (10 s) must cut the connection long before; the
	// 3 minutes only end a test whose server never does.
	start := time.Now()
	headers := "GET /health HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Slow: 1\r\n", 100)
	for i := range len(headers) {
		if _, err := conn.Write([]byte{headers[i]}); err != nil {
			t.Logf("the slow-loris connection was cut after %d of %d header bytes (%v)", i, len(headers), time.Since(start))
			return // closed by the server: what the test wants
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(make([]byte, 512))
		var ne net.Error
		if n > 0 || (err != nil && !(errors.As(err, &ne) && ne.Timeout())) {
			t.Logf("the slow-loris connection was answered or closed after %d of %d header bytes (%v)", i, len(headers), time.Since(start))
			return // an answer or a close: the server gave up on it
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("a slow-loris connection still open after %v (%d header bytes sent)", time.Since(start), i)
		}
	}
	t.Fatalf("the server took all %d header bytes sent a byte a second: no read-header timeout", len(headers))
}
