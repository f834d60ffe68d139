package files

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// TestNoTokenRefuses: while the sandbox has no token and is not open
// (no identity pushed yet, or one pushed without a token), /files admits
// nothing: not the bare request, not a header token, and not a signature
// made with the empty token. Open admits all of them.
func TestNoTokenRefuses(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "etc/passwd"), passwd)
	write(t, filepath.Join(dir, "home/user/s.txt"), "secret data")
	root, err := sandboxfs.New(dir)
	must(t, err)
	stores := map[string]*identity.Store{"nil store": nil, "no identity yet": {}, "no token, not open": {}, "open": {}}
	stores["no token, not open"].Set(identity.Identity{SandboxID: "s"})
	stores["open"].Set(identity.Identity{Open: true})

	readSig := url.Values{"path": {"s.txt"}, "signature": {Signature("s.txt", opRead, "", "", nil)}}
	writeSig := url.Values{"path": {"w.txt"}, "signature": {Signature("w.txt", opWrite, "", "", nil)}}
	requests := map[string]func() *http.Request{
		"bare GET":                func() *http.Request { return httptest.NewRequest("GET", "/files?path=s.txt", nil) },
		"GET with a header token": func() *http.Request { return withToken(httptest.NewRequest("GET", "/files?path=s.txt", nil)) },
		"GET signed with no token": func() *http.Request {
			return httptest.NewRequest("GET", "/files?"+readSig.Encode(), nil)
		},
		"POST signed with no token": func() *http.Request {
			r := httptest.NewRequest("POST", "/files?"+writeSig.Encode(), strings.NewReader("x"))
			r.Header.Set("Content-Type", "application/octet-stream")
			return r
		},
	}
	for sname, store := range stores {
		h := New(Config{Root: root, DefaultUser: "user", Identity: store})
		for rname, req := range requests {
			t.Run(sname+"/"+rname, func(t *testing.T) {
				_ = os.Remove(filepath.Join(dir, "home/user/w.txt"))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req())
				if sname == "open" {
					wantStatus(t, rec.Code, http.StatusOK, rec.Body.Bytes())
					return
				}
				wantError(t, rec.Code, rec.Body.Bytes(), http.StatusUnauthorized, "")
				if rec.Header().Get("Connection") != "close" {
					t.Error("a refusal keeps the connection")
				}
				if _, err := os.Stat(filepath.Join(dir, "home/user/w.txt")); err == nil {
					t.Fatal("a refused upload was written")
				}
			})
		}
	}
}

func withToken(r *http.Request) *http.Request {
	r.Header.Set("X-Access-Token", "anything")
	return r
}
