package files

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

const passwd = "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"

// env is a sandbox root with root and "user" (1000) accounts and /files
// served over it, open to anyone (an identity with no token and Open)
// unless a test sets another identity.
type env struct {
	dir string
	id  *identity.Store
	url string
}

func newEnv(t testing.TB, maxUpload int64) *env {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "etc/passwd"), passwd)
	write(t, filepath.Join(dir, "etc/group"), "root:x:0:\nuser:x:1000:\n")
	must(t, os.MkdirAll(filepath.Join(dir, "home/user"), 0o755))
	root, err := sandboxfs.New(dir)
	must(t, err)
	id := &identity.Store{}
	id.Set(identity.Identity{Open: true})
	h := New(Config{Root: root, DefaultUser: "user", Identity: id, MaxUpload: maxUpload})
	srv := httptest.NewServer(withBasicUser(root, h))
	t.Cleanup(srv.Close)
	return &env{dir: dir, id: id, url: srv.URL + "/files"}
}

// withBasicUser stands in for the envd server's middleware.
func withBasicUser(root sandboxfs.Root, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, _, ok := r.BasicAuth(); ok {
			u, err := root.LookupUser(name)
			if err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			r = r.WithContext(sandboxfs.WithUser(r.Context(), u))
		}
		next.ServeHTTP(w, r)
	})
}

// rawClient asks for no compression of its own, so Accept-Encoding is
// only what a test sets and gzip replies arrive as sent.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// do sends a request and returns the status and the body (raw: Go's
// transport does not decode a gzip it did not ask for).
func (e *env) do(t testing.TB, method, query string, body io.Reader, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+"?"+query, body)
	must(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := rawClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, resp.Header, data
}

// multipartBody builds a form with one "file" part per filename.
func multipartBody(t testing.TB, files map[string]string) (string, *bytes.Buffer) {
	t.Helper()
	buf := &bytes.Buffer{}
	mw := multipart.NewWriter(buf)
	must(t, mw.WriteField("note", "ignored"))
	for name, data := range files {
		w, err := mw.CreateFormFile("file", name)
		must(t, err)
		_, _ = io.WriteString(w, data)
	}
	must(t, mw.Close())
	return mw.FormDataContentType(), buf
}

func TestMultipartUpload(t *testing.T) {
	e := newEnv(t, 0)
	ct, body := multipartBody(t, map[string]string{"ignored-name": "one"})
	code, _, reply := e.do(t, "POST", "path=notes/a.txt&username=user", body, map[string]string{"Content-Type": ct})
	wantStatus(t, code, 200, reply)
	var got []uploaded
	must(t, json.Unmarshal(reply, &got))
	if len(got) != 1 || !reflect.DeepEqual(got[0], uploaded{Name: "a.txt", Type: "file", Path: "/home/user/notes/a.txt"}) {
		t.Fatalf("reply %s", reply)
	}
	wantFile(t, filepath.Join(e.dir, "home/user/notes/a.txt"), "one")
	if os.Geteuid() == 0 {
		wantOwner(t, filepath.Join(e.dir, "home/user/notes"), 1000)
		wantOwner(t, filepath.Join(e.dir, "home/user/notes/a.txt"), 1000)
	}

	ct, body = multipartBody(t, map[string]string{"/tmp/x/1.txt": "first", "rel/2.txt": "second"})
	code, _, reply = e.do(t, "POST", "", body, map[string]string{"Content-Type": ct, "Authorization": "Basic " + basic("root")})
	wantStatus(t, code, 200, reply)
	must(t, json.Unmarshal(reply, &got))
	if len(got) != 2 {
		t.Fatalf("reply %s", reply)
	}
	wantFile(t, filepath.Join(e.dir, "tmp/x/1.txt"), "first")
	wantFile(t, filepath.Join(e.dir, "root/rel/2.txt"), "second") // root's home
	wantOwner(t, filepath.Join(e.dir, "tmp/x/1.txt"), uint32(os.Geteuid()))

	ct, body = multipartBody(t, map[string]string{"a": "1", "b": "2"})
	code, _, reply = e.do(t, "POST", "path=same", body, map[string]string{"Content-Type": ct})
	wantError(t, code, reply, 400, "more than one file")
}

func TestRawAndGzipUpload(t *testing.T) {
	e := newEnv(t, 0)
	code, _, reply := e.do(t, "POST", "path=/data/raw.bin", strings.NewReader("raw bytes"), map[string]string{"Content-Type": "application/octet-stream"})
	wantStatus(t, code, 200, reply)
	wantFile(t, filepath.Join(e.dir, "data/raw.bin"), "raw bytes")

	// Overwriting keeps the file's permissions.
	must(t, os.Chmod(filepath.Join(e.dir, "data/raw.bin"), 0o600))
	code, _, reply = e.do(t, "POST", "path=/data/raw.bin", gzipped(t, "zipped raw"),
		map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
	wantStatus(t, code, 200, reply)
	wantFile(t, filepath.Join(e.dir, "data/raw.bin"), "zipped raw")
	if fi, _ := os.Stat(filepath.Join(e.dir, "data/raw.bin")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode after overwrite %v", fi.Mode())
	}

	ct, body := multipartBody(t, map[string]string{"/data/mp.txt": "zipped multipart"})
	code, _, reply = e.do(t, "POST", "", gzipped(t, body.String()), map[string]string{"Content-Type": ct, "Content-Encoding": "gzip"})
	wantStatus(t, code, 200, reply)
	wantFile(t, filepath.Join(e.dir, "data/mp.txt"), "zipped multipart")
	leftovers, _ := filepath.Glob(filepath.Join(e.dir, "data/.sandlot-upload-*"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

func TestDownload(t *testing.T) {
	e := newEnv(t, 0)
	write(t, filepath.Join(e.dir, "home/user/hello.txt"), "hello world")
	code, h, data := e.do(t, "GET", "path=hello.txt", nil, nil)
	if code != 200 || string(data) != "hello world" || h.Get("Content-Type") != "application/octet-stream" || h.Get("Content-Length") != "11" {
		t.Fatalf("GET = %d %v %q", code, h, data)
	}
	code, h, data = e.do(t, "GET", "path=/home/user/hello.txt", nil, map[string]string{"Accept-Encoding": "gzip"})
	if code != 200 || h.Get("Content-Encoding") != "gzip" || gunzip(t, data) != "hello world" {
		t.Fatalf("gzip GET = %d %v", code, h)
	}
	code, _, data = e.do(t, "GET", "path=hello.txt", nil, map[string]string{"Accept-Encoding": "identity;q=0"})
	wantError(t, code, data, 406, "no acceptable encoding")

	code, _, data = e.do(t, "GET", "path=/nope.txt", nil, nil)
	wantError(t, code, data, 404, "path /nope.txt does not exist")
	code, _, data = e.do(t, "GET", "path=/home", nil, nil)
	wantError(t, code, data, 400, "path /home is a directory")
	code, _, data = e.do(t, "GET", "", nil, nil)
	wantError(t, code, data, 400, "path is required")

	// Escapes stay inside the root: this is the root's passwd, not the
	// host's, and the host's other files are not there.
	code, _, data = e.do(t, "GET", "path="+url.QueryEscape("../../../../../../etc/passwd"), nil, nil)
	if code != 200 || string(data) != passwd {
		t.Fatalf("escape GET = %d %q", code, data)
	}
	must(t, os.Symlink("/../../../../..", filepath.Join(e.dir, "home/user/up")))
	code, _, data = e.do(t, "GET", "path=up/proc/self/status", nil, nil)
	wantError(t, code, data, 404, "does not exist")
}

func TestRequestErrors(t *testing.T) {
	e := newEnv(t, 0)
	ct := map[string]string{"Content-Type": "application/octet-stream"}
	code, _, data := e.do(t, "GET", "path=x&username=ghost", nil, nil)
	wantError(t, code, data, 401, "user ghost does not exist")
	code, _, data = e.do(t, "POST", "", strings.NewReader("x"), ct)
	wantError(t, code, data, 400, "path query parameter is required")
	code, _, data = e.do(t, "POST", "path=/home", strings.NewReader("x"), ct)
	wantError(t, code, data, 400, "is a directory")
	write(t, filepath.Join(e.dir, "file"), "f")
	code, _, data = e.do(t, "POST", "path=/file/below", strings.NewReader("x"), ct)
	wantError(t, code, data, 400, "not a directory")
	code, _, data = e.do(t, "POST", "path=/x", strings.NewReader("--b\r\nbroken"), map[string]string{"Content-Type": "multipart/form-data; boundary=b"})
	wantError(t, code, data, 400, "")
	code, _, data = e.do(t, "POST", "path=/x", strings.NewReader("x"), map[string]string{"Content-Type": "multipart/form-data"})
	wantError(t, code, data, 400, "no boundary")
	code, _, data = e.do(t, "POST", "path=/x", strings.NewReader("x"), map[string]string{"Content-Type": "text/plain"})
	wantError(t, code, data, 400, "unsupported Content-Type")
	code, _, data = e.do(t, "POST", "path=/x", strings.NewReader("not gzip"), map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
	wantError(t, code, data, 400, "")
	code, _, data = e.do(t, "PUT", "path=/x", nil, nil)
	wantError(t, code, data, 405, "")
}

func TestWriteFailureStatus(t *testing.T) {
	err := writeFailure("writing /x", &os.PathError{Op: "write", Path: "/host/x", Err: syscall.ENOSPC})
	if he, ok := err.(*httpError); !ok || he.code != 507 || strings.Contains(he.msg, "/host") {
		t.Fatalf("ENOSPC -> %v", err)
	}
}

func TestMaxUpload(t *testing.T) {
	e := newEnv(t, 1024)
	ct := map[string]string{"Content-Type": "application/octet-stream"}
	code, _, data := e.do(t, "POST", "path=/big", bytes.NewReader(make([]byte, 4096)), ct)
	wantError(t, code, data, 413, "limit of 1024 bytes")
	// Without a Content-Length the limit is found while streaming.
	code, _, data = e.do(t, "POST", "path=/big", io.MultiReader(bytes.NewReader(make([]byte, 64<<10))), ct)
	wantError(t, code, data, 413, "")
	// A small gzip body must not inflate past the limit either.
	bomb := gzipped(t, strings.Repeat("a", 256<<10))
	if bomb.Len() >= 1024 {
		t.Fatalf("the compressed body (%d bytes) is itself over the limit", bomb.Len())
	}
	code, _, data = e.do(t, "POST", "path=/big", bomb,
		map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
	wantError(t, code, data, 413, "")
	if _, err := os.Stat(filepath.Join(e.dir, "big")); err == nil {
		t.Fatal("an over-limit upload was kept")
	}
	code, _, data = e.do(t, "POST", "path=/small", strings.NewReader("ok"), ct)
	wantStatus(t, code, 200, data)
}

func TestSignature(t *testing.T) {
	e := newEnv(t, 0)
	write(t, filepath.Join(e.dir, "home/user/s.txt"), "signed")
	e.id.Set(identity.Identity{AccessToken: "secret"})
	get := func(q url.Values, header map[string]string) (int, []byte) {
		code, _, data := e.do(t, "GET", q.Encode(), nil, header)
		return code, data
	}
	q := url.Values{"path": {"s.txt"}}
	code, data := get(q, nil)
	wantError(t, code, data, 401, "missing signature")
	code, data = get(q, map[string]string{"X-Access-Token": "secret"})
	wantStatus(t, code, 200, data)
	code, data = get(q, map[string]string{"X-Access-Token": "wrong"})
	wantError(t, code, data, 401, "does not match")

	q.Set("signature", Signature("s.txt", "read", "", "secret", nil))
	code, data = get(q, nil)
	wantStatus(t, code, 200, data)
	q.Set("username", "user") // the user is signed too
	code, data = get(q, nil)
	wantError(t, code, data, 401, "invalid signature")

	future, past := int64(4102444800), int64(946684800) // 2100, 2000
	q.Set("signature", Signature("s.txt", "read", "user", "secret", &future))
	q.Set("signature_expiration", "4102444800")
	code, data = get(q, nil)
	wantStatus(t, code, 200, data)
	q.Set("signature", Signature("s.txt", "read", "user", "secret", &past))
	q.Set("signature_expiration", "946684800")
	code, data = get(q, nil)
	wantError(t, code, data, 401, "expired")

	w := url.Values{"path": {"up.txt"}, "signature": {Signature("up.txt", "read", "", "secret", nil)}}
	code, _, data = e.do(t, "POST", w.Encode(), strings.NewReader("x"), map[string]string{"Content-Type": "application/octet-stream"})
	wantError(t, code, data, 401, "invalid signature") // a read signature does not write
	w.Set("signature", Signature("up.txt", "write", "", "secret", nil))
	code, _, data = e.do(t, "POST", w.Encode(), strings.NewReader("x"), map[string]string{"Content-Type": "application/octet-stream"})
	wantStatus(t, code, 200, data)
	if !strings.HasPrefix(w.Get("signature"), "v1_") || strings.Contains(w.Get("signature"), "=") {
		t.Fatalf("signature format %q", w.Get("signature"))
	}
}

func wantStatus(t testing.TB, code, want int, body []byte) {
	t.Helper()
	if code != want {
		t.Fatalf("status %d, want %d: %s", code, want, body)
	}
}

// wantError checks an envd error reply: status, JSON {code, message}.
func wantError(t testing.TB, code int, body []byte, want int, msgPart string) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if code != want || json.Unmarshal(body, &e) != nil || e.Code != want || !strings.Contains(e.Message, msgPart) {
		t.Fatalf("got %d %s, want %d with %q", code, body, want, msgPart)
	}
}

func wantFile(t testing.TB, p, want string) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil || string(got) != want {
		t.Fatalf("%s = %q, %v; want %q", p, got, err, want)
	}
}

func wantOwner(t testing.TB, p string, uid uint32) {
	t.Helper()
	fi, err := os.Stat(p)
	must(t, err)
	if got := fi.Sys().(*syscall.Stat_t).Uid; got != uid {
		t.Fatalf("%s owned by %d, want %d", p, got, uid)
	}
}

func gzipped(t testing.TB, s string) *bytes.Buffer {
	t.Helper()
	buf := &bytes.Buffer{}
	gz := gzip.NewWriter(buf)
	_, _ = io.WriteString(gz, s)
	must(t, gz.Close())
	return buf
}

func gunzip(t testing.TB, data []byte) string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	must(t, err)
	out, err := io.ReadAll(gz)
	must(t, err)
	return string(out)
}

func basic(name string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(name, "")
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

func write(t testing.TB, p, data string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(data), 0o644))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestUploadMetadata: X-Metadata-<key> headers become the file's
// metadata (keys lowercased), returned in the reply; an upload without
// them clears it; a value that is not printable ASCII is refused.
func TestUploadMetadata(t *testing.T) {
	e := newEnv(t, 0)
	code, _, reply := e.do(t, "POST", "path=/home/user/m.txt&username=user", strings.NewReader("x"),
		map[string]string{"Content-Type": "application/octet-stream", "X-Metadata-Owner": "Team A", "x-metadata-k": "v"})
	wantStatus(t, code, 200, reply)
	var got []uploaded
	must(t, json.Unmarshal(reply, &got))
	want := map[string]string{"owner": "Team A", "k": "v"}
	if len(got) != 1 || !reflect.DeepEqual(got[0].Metadata, want) {
		t.Fatalf("reply %s, want metadata %v", reply, want)
	}
	if md, err := sandboxfs.Metadata(filepath.Join(e.dir, "home/user/m.txt")); err != nil || !reflect.DeepEqual(md, want) {
		t.Fatalf("the file's metadata %v (%v), want %v", md, err, want)
	}
	code, _, reply = e.do(t, "POST", "path=/home/user/m.txt&username=user", strings.NewReader("y"),
		map[string]string{"Content-Type": "application/octet-stream"})
	wantStatus(t, code, 200, reply)
	if md, err := sandboxfs.Metadata(filepath.Join(e.dir, "home/user/m.txt")); err != nil || md != nil {
		t.Fatalf("after an upload without metadata: %v (%v), want none", md, err)
	}
	code, _, reply = e.do(t, "POST", "path=/home/user/m.txt&username=user", strings.NewReader("z"),
		map[string]string{"Content-Type": "application/octet-stream", "X-Metadata-K": "caf\xc3\xa9"})
	wantStatus(t, code, 400, reply)
	wantFile(t, filepath.Join(e.dir, "home/user/m.txt"), "y")
}
