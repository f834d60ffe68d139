package envd

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/guest/envd/files"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

// accessCase is one request and what it gets before and after access.
type accessCase struct {
	name, method, path string
	ok                 int    // status once admitted
	refused            string // part of the body of the 401
}

var accessCases = []accessCase{
	{"envs", "GET", "/envs", 200, `"code":401`},
	{"connect", "POST", "/process.Process/List", 501, `"code":"unauthenticated"`},
	{"files", "GET", "/files?path=/f.txt", 200, `"code":401`},
}

// TestAccessFollowsIdentity: with the real guard and /files, everything
// but /health is refused (401, the usual bodies, the connection closed)
// until an identity with a token is pushed, and again when one without a
// token and not open is; an open identity admits callers without one.
func TestAccessFollowsIdentity(t *testing.T) {
	root := testRoot(t)
	if err := os.WriteFile(filepath.Join(root.Dir, "f.txt"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	ids := &identity.Store{}
	srv := serveEnvd(t, root, ids, files.New(files.Config{Root: root, Identity: ids}))
	check := func(stage, token string, admitted bool) {
		t.Helper()
		if code, _, _ := call(t, srv, "GET", "/health", token); code != http.StatusNoContent {
			t.Errorf("%s: /health %d, want 204", stage, code)
		}
		for _, tc := range accessCases {
			code, body, closed := call(t, srv, tc.method, tc.path, token)
			switch {
			case admitted && code != tc.ok:
				t.Errorf("%s: %s %d %q, want %d", stage, tc.name, code, body, tc.ok)
			case !admitted && (code != 401 || !strings.Contains(body, tc.refused) || !closed):
				t.Errorf("%s: %s %d %q (closed %v), want a 401 with %s that closes", stage, tc.name, code, body, closed, tc.refused)
			}
		}
	}
	check("before any identity", "", false)
	check("before any identity, a guessed token", "guess", false)
	ids.Set(identity.Identity{AccessToken: "tok"})
	check("with the token", "tok", true)
	check("with a wrong token", "guess", false)
	ids.Set(identity.Identity{SandboxID: "s"})
	check("pushed without a token", "", false)
	ids.Set(identity.Identity{Open: true})
	check("open, no token", "", true)
}

// call sends one request; closed: the server ends the connection after it.
func call(t *testing.T, srv *httptest.Server, method, path, token string) (int, string, bool) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Close
}
