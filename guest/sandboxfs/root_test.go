package sandboxfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	r, _ := New(dir)
	must(t, os.MkdirAll(filepath.Join(dir, "home/user/sub"), 0o755))
	must(t, os.Symlink("/home/user/sub", filepath.Join(dir, "home/user/abs")))
	must(t, os.Symlink("../../..", filepath.Join(dir, "home/user/up")))
	cases := map[string]string{
		"/tmp/x":              filepath.Join(dir, "tmp/x"),
		"rel/y":               filepath.Join(dir, "home/user/rel/y"),
		"/../../etc/passwd":   filepath.Join(dir, "etc/passwd"),
		"/home/user/abs/f":    filepath.Join(dir, "home/user/sub/f"),
		"/home/user/up/x":     filepath.Join(dir, "x"),
		"/home/user/up/../..": filepath.Join(dir, "home"), // cleaned lexically first
	}
	for in, want := range cases {
		got, err := r.Resolve(in, "/home/user")
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
		if back := r.SandboxPath(got); filepath.Join(dir, back) != got {
			t.Errorf("SandboxPath(%q) = %q", got, back)
		}
	}
	must(t, os.Symlink("/../../../../etc", filepath.Join(dir, "escape")))
	if got, err := r.Resolve("/escape/passwd", "/"); err != nil || got != filepath.Join(dir, "etc/passwd") {
		t.Errorf("absolute symlink escape: %q, %v", got, err)
	}
	if _, err := r.Resolve("", "/"); err == nil {
		t.Error("empty path accepted")
	}
	if _, err := r.Resolve("/a\x00b", "/"); err == nil {
		t.Error("NUL accepted")
	}
}

func TestLookupUser(t *testing.T) {
	dir := t.TempDir()
	r, _ := New(dir)
	if u, err := r.LookupUser("root"); err != nil || u.UID != 0 || u.Home != "/root" {
		t.Fatalf("root without passwd: %+v %v", u, err)
	}
	must(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"), 0o644))
	if u, err := r.LookupUser("user"); err != nil || u.UID != 1000 || u.Home != "/home/user" {
		t.Fatalf("user: %+v %v", u, err)
	}
	if _, err := r.LookupUser("nobody"); err == nil {
		t.Fatal("unknown user found")
	}
	if r.UserName(1000) != "user" || r.UserName(4242) != "4242" {
		t.Fatal("UserName")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
