package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	testVolumeID    = "vol-1"
	testVolumeToken = "vol-token"
)

// fakeVolumeRoots serves one volume, dir, to the holder of its token.
type fakeVolumeRoots struct{ dir string }

func (f fakeVolumeRoots) OpenVolume(_ context.Context, id, token string) (*os.Root, error) {
	switch {
	case id == "broken":
		return nil, errors.New("the store is down")
	case id != testVolumeID:
		return nil, errorf(http.StatusNotFound, "volume %s not found", id)
	case token != testVolumeToken:
		return nil, errorf(http.StatusUnauthorized, "invalid volume token")
	}
	return os.OpenRoot(f.dir)
}

type volumeFixture struct {
	t       *testing.T
	h       *volumeContentHandler
	dir     string // the volume
	outside string // beside it: what no request may reach
	root    bool   // chown to any id works
}

func newVolumeFixture(t *testing.T) *volumeFixture {
	t.Helper()
	base := t.TempDir()
	f := &volumeFixture{t: t, dir: filepath.Join(base, "vol"), outside: filepath.Join(base, "outside"), root: os.Geteuid() == 0}
	for _, d := range []string{f.dir, f.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.h = newVolumeContentHandler(fakeVolumeRoots{dir: f.dir}).(*volumeContentHandler)
	if !f.root { // the defaults must be chown-able by this test
		f.h.uid, f.h.gid = os.Getuid(), os.Getgid()
	}
	return f
}

// call sends method to /volumecontent/vol-1/kind?query with the token.
func (f *volumeFixture) call(method, kind, query, body string) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.send(method, "/volumecontent/"+testVolumeID+"/"+kind+"?"+query, "Bearer "+testVolumeToken, body)
}

func (f *volumeFixture) send(method, target, auth, body string) *httptest.ResponseRecorder {
	f.t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// want checks a status; an error must carry E2B's {code, message}.
func (f *volumeFixture) want(w *httptest.ResponseRecorder, code int) {
	f.t.Helper()
	if w.Code != code {
		f.t.Fatalf("status %d, want %d: %s", w.Code, code, w.Body)
	}
	if code < 400 {
		return
	}
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == nil || *e.Code != code || e.Message == nil || *e.Message == "" {
		f.t.Fatalf("error body %q: want {code: %d, message}", w.Body, code)
	}
}

// entry decodes a VolumeEntryStat as the SDKs parse it: every required
// field present and typed, times in RFC 3339.
func (f *volumeFixture) entry(raw []byte) volumeEntryJSON {
	f.t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		f.t.Fatalf("entry %s: %v", raw, err)
	}
	for _, k := range []string{"name", "type", "path", "atime", "mtime", "ctime"} {
		s, ok := m[k].(string)
		if !ok {
			f.t.Fatalf("entry %s: %s is not a string", raw, k)
		}
		if strings.HasSuffix(k, "time") {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				f.t.Fatalf("entry %s: %s: %v", raw, k, err)
			}
		}
	}
	for _, k := range []string{"size", "mode", "uid", "gid"} {
		if _, ok := m[k].(float64); !ok {
			f.t.Fatalf("entry %s: %s is not a number", raw, k)
		}
	}
	var e volumeEntryJSON
	if err := json.Unmarshal(raw, &e); err != nil {
		f.t.Fatal(err)
	}
	if !slices.Contains([]string{"file", "directory", "symlink", "unknown"}, e.Type) {
		f.t.Fatalf("entry %s: type %q", raw, e.Type)
	}
	return e
}

func (f *volumeFixture) entries(raw []byte) []volumeEntryJSON {
	f.t.Helper()
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		f.t.Fatalf("listing %s: %v", raw, err)
	}
	out := make([]volumeEntryJSON, 0, len(list))
	for _, e := range list {
		out = append(out, f.entry(e))
	}
	return out
}

// onDisk is the mode and owner of a volume path, not following links.
func (f *volumeFixture) onDisk(rel string) (fs.FileMode, uint32, uint32) {
	f.t.Helper()
	fi, err := os.Lstat(filepath.Join(f.dir, rel))
	if err != nil {
		f.t.Fatal(err)
	}
	uid, gid, _, _ := statOwnerTimes(fi)
	return fi.Mode(), uid, gid
}

func (f *volumeFixture) content(path string) string {
	f.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

func volumeQuery(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

func TestVolumeContentAuth(t *testing.T) {
	f := newVolumeFixture(t)
	target := "/volumecontent/" + testVolumeID + "/path?path=/"
	f.want(f.send("GET", target, "", ""), http.StatusUnauthorized)
	f.want(f.send("GET", target, "Bearer wrong", ""), http.StatusUnauthorized)
	f.want(f.send("GET", target, "Basic "+testVolumeToken, ""), http.StatusUnauthorized)
	f.want(f.send("GET", target, "X-API-KEY "+testVolumeToken, ""), http.StatusUnauthorized)
	f.want(f.send("GET", "/volumecontent/nope/path?path=/", "Bearer "+testVolumeToken, ""), http.StatusNotFound)
	f.want(f.send("PUT", "/volumecontent/nope/file?path=/x", "Bearer "+testVolumeToken, "x"), http.StatusNotFound)
	f.want(f.send("GET", "/volumecontent/broken/path?path=/", "Bearer "+testVolumeToken, ""), http.StatusInternalServerError)
	// A bad path is only judged for the volume's token holder.
	f.want(f.send("GET", "/volumecontent/"+testVolumeID+"/path", "Bearer wrong", ""), http.StatusUnauthorized)
	f.want(f.send("GET", target, "bearer "+testVolumeToken, ""), http.StatusOK)
	f.want(f.call("POST", "path", "path=/", ""), http.StatusMethodNotAllowed)
	f.want(f.call("GET", "other", "path=/", ""), http.StatusNotFound)
	if _, err := os.Stat(filepath.Join(f.dir, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused write left a file: %v", err)
	}
}

func TestVolumeContentFileRoundTrip(t *testing.T) {
	f := newVolumeFixture(t)
	f.want(f.call("PUT", "file", volumeQuery("path", "/docs/a.txt"), "hi"), http.StatusNotFound) // no parent, no force
	w := f.call("PUT", "file", volumeQuery("path", "a.txt"), "hello")
	f.want(w, http.StatusCreated)
	e := f.entry(w.Body.Bytes())
	if e.Name != "a.txt" || e.Path != "/a.txt" || e.Type != "file" || e.Size != 5 || e.Mode != 0o644 ||
		e.UID != uint32(f.h.uid) || e.GID != uint32(f.h.gid) {
		t.Fatalf("written: %+v", e)
	}
	w = f.call("GET", "file", volumeQuery("path", "/a.txt"), "")
	f.want(w, http.StatusOK)
	if w.Body.String() != "hello" || w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("read %q (%s)", w.Body, w.Header().Get("Content-Type"))
	}
	w = f.call("GET", "path", volumeQuery("path", "/a.txt"), "")
	f.want(w, http.StatusOK)
	if got := f.entry(w.Body.Bytes()); got.Path != "/a.txt" || got.Size != 5 || got.Mtime.IsZero() || got.Ctime.IsZero() {
		t.Fatalf("stat: %+v", got)
	}
	f.want(f.call("PUT", "file", volumeQuery("path", "/a.txt"), "clobber"), http.StatusConflict)
	f.want(f.call("PATCH", "path", volumeQuery("path", "/a.txt"), `{"mode":384}`), http.StatusOK)
	w = f.call("PUT", "file", volumeQuery("path", "/a.txt", "force", "true"), "bye")
	f.want(w, http.StatusCreated)
	if got := f.entry(w.Body.Bytes()); got.Size != 3 || got.Mode != 0o600 { // a replaced file keeps its mode
		t.Fatalf("replaced: %+v", got)
	}
	if s := f.content(filepath.Join(f.dir, "a.txt")); s != "bye" {
		t.Fatalf("replaced content %q", s)
	}
	if names, _ := filepath.Glob(filepath.Join(f.dir, ".sandlot-upload-*")); len(names) > 0 {
		t.Fatalf("temporary files left: %v", names)
	}
	f.want(f.call("GET", "file", volumeQuery("path", "/missing"), ""), http.StatusNotFound)
	f.want(f.call("GET", "path", volumeQuery("path", "/missing"), ""), http.StatusNotFound)
}

func TestVolumeContentForcedWrite(t *testing.T) {
	f := newVolumeFixture(t)
	id := f.h.uid
	if f.root {
		id = 1234
	}
	ids := strconv.Itoa(id)
	w := f.call("PUT", "file", volumeQuery("path", "/deep/er/b.bin", "force", "true", "uid", ids, "gid", ids, "mode", "416"), "\x00\x01")
	f.want(w, http.StatusCreated)
	if e := f.entry(w.Body.Bytes()); e.Mode != 0o640 || e.UID != uint32(id) || e.GID != uint32(id) || e.Path != "/deep/er/b.bin" {
		t.Fatalf("written: %+v", e)
	}
	for _, d := range []string{"deep", "deep/er"} { // parents: the request's owner, the default mode
		if mode, uid, gid := f.onDisk(d); mode != fs.ModeDir|0o755 || uid != uint32(id) || gid != uint32(id) {
			t.Fatalf("%s: %v %d:%d", d, mode, uid, gid)
		}
	}
	f.want(f.call("PUT", "file", volumeQuery("path", "/"), "x"), http.StatusBadRequest)
	f.want(f.call("PUT", "file", volumeQuery("path", "/deep"), "x"), http.StatusBadRequest)
	f.want(f.call("PUT", "file", volumeQuery("path", "/deep", "force", "true"), "x"), http.StatusBadRequest)
	f.want(f.call("GET", "file", volumeQuery("path", "/deep"), ""), http.StatusBadRequest)
	f.want(f.call("PUT", "file", volumeQuery("path", "/deep/er/b.bin/c", "force", "true"), "x"), http.StatusBadRequest)
	f.want(f.call("PUT", "file", volumeQuery("path", "/x", "uid", "4294967295"), "x"), http.StatusBadRequest)
	f.want(f.call("PUT", "file", volumeQuery("path", "/x", "uid", "-1"), "x"), http.StatusBadRequest)
	f.want(f.call("PUT", "file", volumeQuery("path", "/x", "force", "maybe"), "x"), http.StatusBadRequest)
	f.want(f.call("PUT", "file", volumeQuery("path", "/x", "mode", "4096"), "x"), http.StatusBadRequest)
}

func TestVolumeContentNoSetuid(t *testing.T) {
	f := newVolumeFixture(t)
	f.want(f.call("PUT", "file", volumeQuery("path", "/s", "mode", "2541"), "#!"), http.StatusCreated) // 0o4755
	f.want(f.call("POST", "dir", volumeQuery("path", "/g", "mode", "1533"), ""), http.StatusCreated)   // 0o2775
	f.want(f.call("PUT", "file", volumeQuery("path", "/p"), "x"), http.StatusCreated)
	f.want(f.call("PATCH", "path", volumeQuery("path", "/p"), `{"mode":3583}`), http.StatusOK) // 0o6777
	for rel, perm := range map[string]fs.FileMode{"s": 0o755, "g": 0o775, "p": 0o777} {
		mode, _, _ := f.onDisk(rel)
		if mode.Perm() != perm || mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Fatalf("%s: mode %v, want perm %v and no setuid/setgid/sticky", rel, mode, perm)
		}
	}
	f.want(f.call("PATCH", "path", volumeQuery("path", "/p"), `{"mode":4096}`), http.StatusBadRequest)
	f.want(f.call("PATCH", "path", volumeQuery("path", "/p"), `{"uid":-1}`), http.StatusBadRequest)
	f.want(f.call("PATCH", "path", volumeQuery("path", "/p"), `not json`), http.StatusBadRequest)
}

func TestVolumeContentMakeDir(t *testing.T) {
	f := newVolumeFixture(t)
	w := f.call("POST", "dir", volumeQuery("path", "/d"), "")
	f.want(w, http.StatusCreated)
	if e := f.entry(w.Body.Bytes()); e.Type != "directory" || e.Name != "d" || e.Path != "/d" || e.Mode != 0o755 || e.UID != uint32(f.h.uid) {
		t.Fatalf("made: %+v", e)
	}
	f.want(f.call("POST", "dir", volumeQuery("path", "/d"), ""), http.StatusConflict)
	f.want(f.call("POST", "dir", volumeQuery("path", "/d", "force", "true", "mode", "448"), ""), http.StatusCreated)
	if mode, _, _ := f.onDisk("d"); mode.Perm() != 0o755 { // an existing directory is left as it is
		t.Fatalf("existing directory changed to %v", mode)
	}
	f.want(f.call("POST", "dir", volumeQuery("path", "/x/y/z"), ""), http.StatusNotFound)
	w = f.call("POST", "dir", volumeQuery("path", "/x/y/z", "force", "true", "mode", "448"), "")
	f.want(w, http.StatusCreated)
	if e := f.entry(w.Body.Bytes()); e.Mode != 0o700 || e.Path != "/x/y/z" {
		t.Fatalf("made: %+v", e)
	}
	f.want(f.call("POST", "dir", volumeQuery("path", "/"), ""), http.StatusConflict)
	f.want(f.call("POST", "dir", volumeQuery("path", "/", "force", "true"), ""), http.StatusCreated)
	f.want(f.call("PUT", "file", volumeQuery("path", "/f"), "x"), http.StatusCreated)
	f.want(f.call("POST", "dir", volumeQuery("path", "/f", "force", "true"), ""), http.StatusConflict)
	f.want(f.call("POST", "dir", volumeQuery("path", "/f/sub", "force", "true"), ""), http.StatusBadRequest)
}

func TestVolumeContentList(t *testing.T) {
	f := newVolumeFixture(t)
	f.want(f.call("PUT", "file", volumeQuery("path", "/b/c/d.txt", "force", "true"), "deep"), http.StatusCreated)
	f.want(f.call("PUT", "file", volumeQuery("path", "/a.txt"), "a"), http.StatusCreated)
	if err := os.Symlink("a.txt", filepath.Join(f.dir, "link")); err != nil {
		t.Fatal(err)
	}
	paths := func(query string) []string {
		w := f.call("GET", "dir", query, "")
		f.want(w, http.StatusOK)
		var out []string
		for _, e := range f.entries(w.Body.Bytes()) {
			out = append(out, e.Path)
			if e.Name == "link" && (e.Type != "symlink" || e.Target != "a.txt") {
				t.Fatalf("link: %+v", e)
			}
		}
		return out
	}
	for query, want := range map[string][]string{
		volumeQuery("path", "/"):               {"/a.txt", "/b", "/link"},
		volumeQuery("path", "/", "depth", "0"): {"/a.txt", "/b", "/link"},
		volumeQuery("path", "", "depth", "3"):  nil, // no path: refused below
		volumeQuery("path", "/", "depth", "3"): {"/a.txt", "/b", "/b/c", "/b/c/d.txt", "/link"},
		volumeQuery("path", "b", "depth", "2"): {"/b/c", "/b/c/d.txt"},
	} {
		if want == nil {
			f.want(f.call("GET", "dir", query, ""), http.StatusBadRequest)
		} else if got := paths(query); !slices.Equal(got, want) {
			t.Fatalf("%s: %v, want %v", query, got, want)
		}
	}
	f.want(f.call("POST", "dir", volumeQuery("path", "/empty"), ""), http.StatusCreated)
	if w := f.call("GET", "dir", volumeQuery("path", "/empty"), ""); strings.TrimSpace(w.Body.String()) != "[]" {
		t.Fatalf("empty directory: %s", w.Body)
	}
	f.want(f.call("GET", "dir", volumeQuery("path", "/", "depth", "11"), ""), http.StatusBadRequest)
	f.want(f.call("GET", "dir", volumeQuery("path", "/", "depth", "-1"), ""), http.StatusBadRequest)
	f.want(f.call("GET", "dir", volumeQuery("path", "/a.txt"), ""), http.StatusBadRequest)
	f.want(f.call("GET", "dir", volumeQuery("path", "/missing"), ""), http.StatusNotFound)
	f.h.listLimit = 2
	f.want(f.call("GET", "dir", volumeQuery("path", "/"), ""), http.StatusBadRequest)
}

func TestVolumeContentPatchAndDelete(t *testing.T) {
	f := newVolumeFixture(t)
	f.want(f.call("PUT", "file", volumeQuery("path", "/t/f", "force", "true"), "x"), http.StatusCreated)
	id := uint32(f.h.uid)
	if f.root {
		id = 1001
	}
	w := f.call("PATCH", "path", volumeQuery("path", "/t/f"), `{"uid":`+strconv.Itoa(int(id))+`,"gid":`+strconv.Itoa(int(id))+`,"mode":493}`)
	f.want(w, http.StatusOK)
	if e := f.entry(w.Body.Bytes()); e.UID != id || e.GID != id || e.Mode != 0o755 || e.Path != "/t/f" {
		t.Fatalf("patched: %+v", e)
	}
	f.want(f.call("PATCH", "path", volumeQuery("path", "/t/f"), ""), http.StatusOK) // nothing to change
	f.want(f.call("PATCH", "path", volumeQuery("path", "/missing"), `{"mode":420}`), http.StatusNotFound)
	f.want(f.call("DELETE", "path", volumeQuery("path", "/"), ""), http.StatusBadRequest)
	f.want(f.call("DELETE", "path", volumeQuery("path", "/missing"), ""), http.StatusNotFound)
	f.want(f.call("DELETE", "path", volumeQuery("path", "/t/f"), ""), http.StatusNoContent)
	f.want(f.call("PUT", "file", volumeQuery("path", "/t/u/v", "force", "true"), "x"), http.StatusCreated)
	f.want(f.call("DELETE", "path", volumeQuery("path", "/t"), ""), http.StatusNoContent) // a whole tree
	if _, err := os.Lstat(filepath.Join(f.dir, "t")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("deleted tree: %v", err)
	}
}

func TestVolumeContentUploadLimit(t *testing.T) {
	f := newVolumeFixture(t)
	f.h.uploadLimit = 8
	streamed := func(method, query, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/volumecontent/"+testVolumeID+"/file?"+query, io.NopCloser(strings.NewReader(body)))
		r.ContentLength = -1 // chunked: the limit is met mid-copy
		r.Header.Set("Authorization", "Bearer "+testVolumeToken)
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		return w
	}
	f.want(f.call("PUT", "file", volumeQuery("path", "/big"), "123456789"), http.StatusRequestEntityTooLarge)
	f.want(streamed("PUT", volumeQuery("path", "/big"), "123456789"), http.StatusRequestEntityTooLarge)
	if _, err := os.Lstat(filepath.Join(f.dir, "big")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused upload left its file: %v", err)
	}
	f.want(streamed("PUT", volumeQuery("path", "/ok"), "12345678"), http.StatusCreated)
	f.want(streamed("PUT", volumeQuery("path", "/ok", "force", "true"), "123456789"), http.StatusRequestEntityTooLarge)
	if s := f.content(filepath.Join(f.dir, "ok")); s != "12345678" {
		t.Fatalf("a refused overwrite changed the file to %q", s)
	}
	if names, _ := filepath.Glob(filepath.Join(f.dir, ".sandlot-upload-*")); len(names) > 0 {
		t.Fatalf("temporary files left: %v", names)
	}
}

// TestVolumeContentConfinement: no path, "..", or link planted in the
// volume reaches the directory beside it.
func TestVolumeContentConfinement(t *testing.T) {
	f := newVolumeFixture(t)
	secret := filepath.Join(f.outside, "secret")
	if err := os.WriteFile(secret, []byte("top secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"abs": f.outside, "up": "../outside", "pw": "/etc/passwd"} {
		if err := os.Symlink(to, filepath.Join(f.dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		method, kind, query, body string
		code                      int
	}{
		{"GET", "file", volumeQuery("path", "../outside/secret"), "", 404}, // ".." stops at the volume's root
		{"GET", "file", volumeQuery("path", "/../../outside/secret"), "", 404},
		{"GET", "file", volumeQuery("path", "abs/secret"), "", 403}, {"GET", "file", volumeQuery("path", "up/secret"), "", 403},
		{"GET", "file", volumeQuery("path", "pw"), "", 403}, {"GET", "path", volumeQuery("path", "abs/secret"), "", 403},
		{"GET", "dir", volumeQuery("path", "abs"), "", 403}, {"GET", "dir", volumeQuery("path", "up"), "", 403},
		{"PUT", "file", volumeQuery("path", "abs/new"), "x", 403}, {"PUT", "file", volumeQuery("path", "up/new"), "x", 403},
		{"PUT", "file", volumeQuery("path", "abs/secret", "force", "true"), "x", 403},
		{"PUT", "file", volumeQuery("path", "abs/sub/new", "force", "true"), "x", 403},
		{"PUT", "file", volumeQuery("path", "pw"), "x", 409}, // the link is there: not written through
		{"POST", "dir", volumeQuery("path", "abs/d"), "", 403}, {"POST", "dir", volumeQuery("path", "abs/d/e", "force", "true"), "", 403},
		{"PATCH", "path", volumeQuery("path", "abs/secret"), `{"mode":511}`, 403},
		{"PATCH", "path", volumeQuery("path", "abs"), `{"mode":511}`, 403},
		{"PATCH", "path", volumeQuery("path", "pw"), `{"uid":1,"gid":1}`, 403},
		{"DELETE", "path", volumeQuery("path", "abs/secret"), "", 403},
		{"GET", "file", "path=a%00b", "", 400}, {"GET", "file", "path=", "", 400}, {"GET", "file", "", "", 400},
	} {
		if w := f.call(c.method, c.kind, c.query, c.body); w.Code != c.code {
			t.Fatalf("%s %s?%s: %d, want %d: %s", c.method, c.kind, c.query, w.Code, c.code, w.Body)
		}
	}
	w := f.call("GET", "path", volumeQuery("path", "abs"), "") // the link itself is the volume's
	f.want(w, http.StatusOK)
	if e := f.entry(w.Body.Bytes()); e.Type != "symlink" || e.Target != f.outside {
		t.Fatalf("link: %+v", e)
	}
	f.want(f.call("PUT", "file", volumeQuery("path", "abs", "force", "true"), "mine"), http.StatusCreated) // replaces the link
	f.want(f.call("DELETE", "path", volumeQuery("path", "up"), ""), http.StatusNoContent)                  // removes the link
	f.checkOutside(secret)
}

// checkOutside: the directory beside the volume is as it was.
func (f *volumeFixture) checkOutside(secret string) {
	f.t.Helper()
	if s := f.content(secret); s != "top secret" {
		f.t.Fatalf("secret now %q", s)
	}
	if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
		f.t.Fatalf("secret: %v %v", fi.Mode(), err)
	}
	names, err := os.ReadDir(f.outside)
	if err != nil || len(names) != 1 {
		f.t.Fatalf("outside holds %v (%v)", names, err)
	}
	if fi, err := os.Lstat(filepath.Join(f.dir, "abs")); err != nil || !fi.Mode().IsRegular() {
		f.t.Fatalf("abs: %v", err)
	}
}

// TestVolumeContentSpecialFiles: a FIFO planted in the volume is refused
// at once, never read (a read would block the request forever).
func TestVolumeContentSpecialFiles(t *testing.T) {
	f := newVolumeFixture(t)
	if err := syscall.Mkfifo(filepath.Join(f.dir, "fifo"), 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	done := make(chan []*httptest.ResponseRecorder)
	go func() { // the requests only: a test fails on its own goroutine
		done <- []*httptest.ResponseRecorder{f.call("GET", "file", volumeQuery("path", "/fifo"), ""),
			f.call("GET", "dir", volumeQuery("path", "/fifo"), ""), f.call("PUT", "file", volumeQuery("path", "/fifo"), "x")}
	}()
	select {
	case ws := <-done:
		f.want(ws[0], http.StatusBadRequest)
		f.want(ws[1], http.StatusBadRequest)
		f.want(ws[2], http.StatusConflict)
	case <-time.After(10 * time.Second):
		t.Fatal("a FIFO blocked the request")
	}
	w := f.call("GET", "path", volumeQuery("path", "/fifo"), "")
	f.want(w, http.StatusOK)
	if e := f.entry(w.Body.Bytes()); e.Type != "unknown" {
		t.Fatalf("fifo: %+v", e)
	}
}
