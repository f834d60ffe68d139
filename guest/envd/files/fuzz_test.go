package files

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// FuzzUpload feeds arbitrary bodies, content types, encodings and paths
// to POST /files: it must answer every one with a status and, for an
// error, envd's JSON error body, and never panic.
func FuzzUpload(f *testing.F) {
	ct, mp := multipartBody(f, map[string]string{"/f/a.txt": "a", "b.txt": "b"})
	f.Add(mp.Bytes(), ct, "", "")
	f.Add(mp.Bytes(), ct, "", "/f/one")
	f.Add(gzipped(f, mp.String()).Bytes(), ct, "gzip", "")
	f.Add([]byte("raw"), "application/octet-stream", "", "raw.bin")
	f.Add(gzipped(f, "raw").Bytes(), "application/octet-stream", "gzip", "/f/raw.gz")
	f.Add([]byte("--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../../x\"\r\n\r\nbody\r\n--x--"), "multipart/form-data; boundary=x", "", "")
	f.Add([]byte("--x\r\n\r\n"), "multipart/form-data; boundary=x", "identity", "")
	f.Add([]byte{0x1f, 0x8b, 0, 0}, "application/octet-stream", "gzip", "/\x00")
	f.Add([]byte(""), "multipart/mixed; boundary=\"", "br", "/etc")

	dir := f.TempDir()
	write(f, filepath.Join(dir, "etc/passwd"), passwd)
	if err := os.MkdirAll(filepath.Join(dir, "home/user"), 0o755); err != nil {
		f.Fatal(err)
	}
	open := &identity.Store{}
	open.Set(identity.Identity{Open: true}) // past the access check, into the parsers
	h := New(Config{Root: sandboxfs.Root{Dir: dir}, DefaultUser: "user", Identity: open, MaxUpload: 1 << 20})

	f.Fuzz(func(t *testing.T, body []byte, contentType, encoding, filePath string) {
		q := url.Values{}
		if filePath != "" {
			q.Set("path", filePath)
		}
		req := httptest.NewRequest(http.MethodPost, "/files?"+q.Encode(), bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Content-Encoding", encoding)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkReply(t, rec)
	})
}

func checkReply(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	switch {
	case rec.Code == http.StatusOK:
		var done []uploaded
		if err := json.Unmarshal(rec.Body.Bytes(), &done); err != nil || len(done) == 0 {
			t.Fatalf("200 with body %q", rec.Body)
		}
	case rec.Code >= 400 && rec.Code < 600:
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != rec.Code || e.Message == "" {
			t.Fatalf("%d with body %q", rec.Code, rec.Body)
		}
	default:
		t.Fatalf("status %d", rec.Code)
	}
}
