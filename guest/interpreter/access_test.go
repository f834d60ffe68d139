package interpreter

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/guest/envd"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

// TestAccessFollowsIdentity: the interpreter as the agent serves it
// (behind envd.RequireToken) refuses everything but /health until the
// host pushes an identity with a token, then runs code for that token.
func TestAccessFollowsIdentity(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Python: testPython(t), Cwd: t.TempDir()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ids := &identity.Store{}
	ts := httptest.NewServer(envd.RequireToken(ids, s.Handler()))
	t.Cleanup(func() { ts.Close(); s.Close() })
	send := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const run = `{"code":"40 + 2"}`
	for _, token := range []string{"", "guess"} {
		if code, body := send("POST", "/execute", token, run); code != 401 || !strings.Contains(body, `"code":401`) {
			t.Errorf("execute before any identity (token %q): %d %q, want 401", token, code, body)
		}
		if code, _ := send("GET", "/contexts", token, ""); code != 401 {
			t.Errorf("contexts before any identity (token %q): %d, want 401", token, code)
		}
	}
	if code, body := send("GET", "/health", "", ""); code != 200 || body != `"OK"` {
		t.Errorf("health before any identity: %d %q", code, body)
	}
	ids.Set(identity.Identity{AccessToken: "tok"})
	if code, _ := send("POST", "/execute", "guess", run); code != 401 {
		t.Errorf("execute with a wrong token: %d, want 401", code)
	}
	if code, body := send("GET", "/contexts", "tok", ""); code != 200 || body != "[]" {
		t.Errorf("contexts with the token: %d %q", code, body)
	}
	code, body := send("POST", "/execute", "tok", run)
	if code != 200 || !strings.Contains(body, `"text": "42"`) || !strings.Contains(body, "end_of_execution") {
		t.Errorf("execute with the token: %d %q", code, body)
	}
}
