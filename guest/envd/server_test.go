package envd

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb/filesystempbconnect"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// newTestServer mounts the real guard and mux with stand-in services that
// echo the user the guard resolved, so the token and user checks are
// exercised without the services' own logic.
func newTestServer(t *testing.T, token string) *httptest.Server {
	t.Helper()
	ids := &identity.Store{}
	ids.Set(identity.Identity{AccessToken: token, Env: map[string]string{"A": "1"}})
	files := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := sandboxfs.UserFrom(r.Context())
		_, _ = io.WriteString(w, "user="+u.Name)
	})
	return serveEnvd(t, testRoot(t), ids, files)
}

// testRoot is a sandbox root with root and "user" accounts.
func testRoot(t *testing.T) sandboxfs.Root {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"
	if err := os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := sandboxfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func serveEnvd(t *testing.T, root sandboxfs.Root, ids *identity.Store, files http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewHandler(Config{Root: root, Identity: ids, DefaultUser: "root",
		Process: processpbconnect.UnimplementedProcessHandler{}, Filesystem: filesystempbconnect.UnimplementedFilesystemHandler{},
		Files: files}))
	t.Cleanup(srv.Close)
	return srv
}

func TestGuard(t *testing.T) {
	srv := newTestServer(t, "s3cret")
	basic := func(u string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":")) }
	cases := []struct {
		name, method, path, token, auth string
		status                          int
		body                            string
	}{
		{"health needs no token", "GET", "/health", "", "", 204, ""},
		{"envs without token", "GET", "/envs", "", "", 401, `"code":401`},
		{"envs with a wrong token", "GET", "/envs", "nope", "", 401, "X-Access-Token"},
		{"files checks its own token (signed URLs)", "GET", "/files?path=/x", "", "", 200, "user=root"},
		{"files with the token, default user", "GET", "/files?path=/x", "s3cret", "", 200, "user=root"},
		{"files as user", "GET", "/files?path=/x", "s3cret", basic("user"), 200, "user=user"},
		{"unknown user", "GET", "/files?path=/x", "s3cret", basic("mallory"), 401, "does not exist"},
		{"bad authorization header", "GET", "/files?path=/x", "s3cret", "Bearer x", 400, "Basic"},
		{"connect without token", "POST", "/process.Process/List", "", "", 401, `"code":"unauthenticated"`},
		{"envs", "GET", "/envs", "s3cret", "", 200, `"A":"1"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			if tc.token != "" {
				req.Header.Set("X-Access-Token", tc.token)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.body) {
				t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, body, tc.status, tc.body)
			}
		})
	}
}

// TestRequireToken guards the interpreter's API with the same token and
// the same fail-closed rule: nothing but /health before an identity with
// a token (or an open one) is pushed.
func TestRequireToken(t *testing.T) {
	ids := &identity.Store{}
	h := RequireToken(ids, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
	for _, tc := range []struct {
		id          *identity.Identity // nil: keep the previous one
		path, token string
		want        int
	}{
		{nil, "/health", "", 200}, {nil, "/execute", "", 401}, {nil, "/execute", "guess", 401},
		{&identity.Identity{SandboxID: "s"}, "/execute", "", 401}, {nil, "/health", "", 200},
		{&identity.Identity{AccessToken: "s3cret"}, "/health", "", 200}, {nil, "/execute", "", 401},
		{nil, "/execute", "bad", 401}, {nil, "/execute", "s3cret", 200},
		{&identity.Identity{Open: true}, "/execute", "", 200},
	} {
		if tc.id != nil {
			ids.Set(*tc.id)
		}
		req := httptest.NewRequest("POST", tc.path, nil)
		req.Header.Set("X-Access-Token", tc.token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%+v: %s with token %q: %d, want %d", ids.Get(), tc.path, tc.token, rec.Code, tc.want)
		}
		if rec.Code == 401 && (rec.Header().Get("Connection") != "close" || !strings.Contains(rec.Body.String(), `"code":401`)) {
			t.Errorf("refusal %v %q: want Connection: close and the {code, message} body", rec.Header(), rec.Body)
		}
	}
}

// FuzzGuard: arbitrary paths, tokens and authorization headers never crash
// the guard and always get an answer.
func FuzzGuard(f *testing.F) {
	f.Add("/files", "s3cret", "Basic dXNlcjo=")
	f.Add("/process.Process/Start", "", "Basic !!!")
	f.Add("/envs", "x", "Basic Og==")
	dir := f.TempDir()
	root, _ := sandboxfs.New(dir)
	ids := &identity.Store{}
	ids.Set(identity.Identity{AccessToken: "s3cret"})
	h := NewHandler(Config{Root: root, Identity: ids, DefaultUser: "root",
		Process: processpbconnect.UnimplementedProcessHandler{}, Filesystem: filesystempbconnect.UnimplementedFilesystemHandler{},
		Files: http.NotFoundHandler()})
	f.Fuzz(func(t *testing.T, path, token, auth string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t#?%") {
			return
		}
		req := httptest.NewRequest("POST", path, strings.NewReader("{}"))
		req.Header.Set("X-Access-Token", token)
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code < 200 || rec.Code > 599 {
			t.Fatalf("status %d", rec.Code)
		}
	})
}
