package filesystem

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb/filesystempbconnect"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

const passwd = "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"

// env is a sandbox root with root and "user" (1000) accounts, the service
// over it and a client speaking the SDK's codec (proto JSON).
type env struct {
	dir    string
	svc    *Service
	client filesystempbconnect.FilesystemClient
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "etc/passwd"), passwd)
	write(t, filepath.Join(dir, "etc/group"), "root:x:0:\nuser:x:1000:\n")
	must(t, os.MkdirAll(filepath.Join(dir, "home/user"), 0o755))
	root, err := sandboxfs.New(dir)
	must(t, err)
	svc := New(Config{Root: root, DefaultUser: "user"})
	t.Cleanup(svc.Close)
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(withBasicUser(root, mux))
	t.Cleanup(srv.Close)
	client := filesystempbconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON())
	return &env{dir: dir, svc: svc, client: client}
}

// withBasicUser stands in for the envd server's middleware: the user of
// `Authorization: Basic user:` is who the request acts as.
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

func asUser[T any](msg *T, name string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set("Authorization", "Basic "+basic(name))
	return req
}

func basic(name string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(name, "")
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

func TestStatMakeDirMoveRemove(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	mk, err := e.client.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "work/a/b"}))
	must(t, err)
	got := mk.Msg.GetEntry()
	if got.GetPath() != "/home/user/work/a/b" || got.GetType() != pb.FileType_FILE_TYPE_DIRECTORY || got.GetPermissions() != "drwxr-xr-x" || got.GetName() != "b" {
		t.Fatalf("MakeDir entry = %v", got)
	}
	if os.Geteuid() == 0 && (got.GetOwner() != "user" || got.GetGroup() != "user") {
		t.Fatalf("made by user but owned by %s:%s", got.GetOwner(), got.GetGroup())
	}
	_, err = e.client.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "/home/user/work/a/b"}))
	wantCode(t, err, connect.CodeAlreadyExists)

	write(t, filepath.Join(e.dir, "home/user/work/a/f.txt"), "hello")
	must(t, os.Symlink("f.txt", filepath.Join(e.dir, "home/user/work/a/link")))
	st, err := e.client.Stat(ctx, asUser(&pb.StatRequest{Path: "/home/user/work/a/f.txt"}, "root"))
	must(t, err)
	f := st.Msg.GetEntry()
	if f.GetType() != pb.FileType_FILE_TYPE_FILE || f.GetSize() != 5 || f.GetPermissions() != "-rw-r--r--" ||
		f.GetMode() != 0o644 || f.GetOwner() != "root" || f.GetGroup() != "root" || f.GetModifiedTime() == nil {
		t.Fatalf("Stat file = %v", f)
	}
	st, err = e.client.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: "work/a/link"}))
	must(t, err)
	if l := st.Msg.GetEntry(); l.GetType() != pb.FileType_FILE_TYPE_SYMLINK || l.GetSymlinkTarget() != "/home/user/work/a/f.txt" {
		t.Fatalf("Stat symlink = %v", l)
	}

	mv, err := e.client.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "work/a/f.txt", Destination: "/home/user/work/g.txt"}))
	must(t, err)
	if mv.Msg.GetEntry().GetPath() != "/home/user/work/g.txt" || mv.Msg.GetEntry().GetSize() != 5 {
		t.Fatalf("Move entry = %v", mv.Msg.GetEntry())
	}
	_, err = e.client.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: "work/a/f.txt"}))
	wantCode(t, err, connect.CodeNotFound)
	if !strings.Contains(err.Error(), "path /home/user/work/a/f.txt does not exist") {
		t.Fatalf("not_found message = %q", err)
	}
	_, err = e.client.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "work/g.txt", Destination: "nodir/g.txt"}))
	wantCode(t, err, connect.CodeNotFound)
	if _, err := os.Stat(filepath.Join(e.dir, "home/user/nodir")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("Move created the destination's parent")
	}
	_, err = e.client.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "missing", Destination: "x"}))
	wantCode(t, err, connect.CodeNotFound)

	_, err = e.client.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: "work"}))
	must(t, err)
	if _, err := os.Stat(filepath.Join(e.dir, "home/user/work")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("Remove left the directory")
	}
	_, err = e.client.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: "work"}))
	must(t, err) // gone already: no error, as on E2B
	_, err = e.client.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: "/"}))
	wantCode(t, err, connect.CodeInvalidArgument)
}

func TestListDir(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, f := range []string{"d/a.txt", "d/sub/b.txt", "d/sub/deep/c.txt"} {
		write(t, filepath.Join(e.dir, "home/user", f), f)
	}
	list := func(depth uint32) []string {
		res, err := e.client.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: "/home/user/d", Depth: depth}))
		must(t, err)
		var paths []string
		for _, en := range res.Msg.GetEntries() {
			paths = append(paths, en.GetPath())
		}
		slices.Sort(paths)
		return paths
	}
	if got, want := list(0), []string{"/home/user/d/a.txt", "/home/user/d/sub"}; !slices.Equal(got, want) {
		t.Fatalf("depth 1: %v, want %v", got, want)
	}
	want2 := []string{"/home/user/d/a.txt", "/home/user/d/sub", "/home/user/d/sub/b.txt", "/home/user/d/sub/deep"}
	if got := list(2); !slices.Equal(got, want2) {
		t.Fatalf("depth 2: %v, want %v", got, want2)
	}
	_, err := e.client.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: "d/a.txt"}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = e.client.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: "/nope"}))
	wantCode(t, err, connect.CodeNotFound)
}

// TestConfinement: no path, however written, reaches outside the root,
// and no reply names a host path.
func TestConfinement(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(t, os.Symlink("../../../../../../..", filepath.Join(e.dir, "home/user/up")))
	must(t, os.Symlink("/../../../../etc", filepath.Join(e.dir, "home/user/abs")))
	for _, p := range []string{"/../../../etc/passwd", "up/etc/passwd", "abs/passwd", "/home/user/../../../../etc/passwd"} {
		res, err := e.client.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: p}))
		must(t, err)
		en := res.Msg.GetEntry()
		// The root's own passwd (two lines), not the host's.
		if en.GetSize() != int64(len(passwd)) || !strings.HasPrefix(en.GetPath(), "/") || strings.Contains(en.GetPath(), e.dir) {
			t.Fatalf("Stat(%q) = %v", p, en)
		}
	}
	res, err := e.client.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: "up", Depth: 3}))
	must(t, err)
	for _, en := range res.Msg.GetEntries() {
		if strings.Contains(en.GetPath(), e.dir) || strings.Contains(en.GetSymlinkTarget(), e.dir) {
			t.Fatalf("host path leaked: %v", en)
		}
	}
	_, err = e.client.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: "/../.."}))
	wantCode(t, err, connect.CodeInvalidArgument) // that is "/"
	_, err = e.client.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: "a\x00b"}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = e.client.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: ""}))
	wantCode(t, err, connect.CodeInvalidArgument)
	ghost := New(Config{Root: e.svc.cfg.Root, DefaultUser: "ghost"})
	_, err = ghost.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: "x"}))
	wantCode(t, err, connect.CodeUnauthenticated)
}

func TestPermissionsString(t *testing.T) {
	cases := map[fs.FileMode]string{
		0o644:                  "-rw-r--r--",
		fs.ModeDir | 0o755:     "drwxr-xr-x",
		fs.ModeSymlink | 0o777: "lrwxrwxrwx",
		fs.ModeSetuid | 0o755:  "-rwsr-xr-x",
		fs.ModeDir | fs.ModeSticky | 0o1777&0o777: "drwxrwxrwt",
		fs.ModeSetgid | 0o640:                     "-rw-r-S---",
	}
	for m, want := range cases {
		if got := permissions(m); got != want {
			t.Errorf("permissions(%v) = %q, want %q", m, got, want)
		}
	}
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("error %v, want code %v", err, code)
	}
}

func write(t *testing.T, p, data string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(data), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
