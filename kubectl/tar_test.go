package kubectl

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestEntryPath(t *testing.T) {
	cases := []struct {
		name, prefix, rel string
		ok                bool
	}{
		{"dir", "dir", "", true},
		{"dir/", "dir", "", true},
		{"dir/sub/f", "dir", "sub/f", true},
		{"./dir/f", "dir", "f", true},
		{"dirt/f", "dir", "", false},
		{"other", "dir", "", false},
		{"dir/../../etc/passwd", "dir", "", false},
		{"../dir/f", "dir", "", false},
		{"/dir/f", "dir", "", false},
		{"dir//f", "dir", "", false},
		{"./etc/hosts", ".", "etc/hosts", true},
		{"./", ".", "", true},
		{"../x", ".", "", false},
	}
	for _, c := range cases {
		rel, ok := entryPath(c.name, c.prefix)
		if rel != c.rel || ok != c.ok {
			t.Errorf("entryPath(%q, %q) = %q, %v; want %q, %v", c.name, c.prefix, rel, ok, c.rel, c.ok)
		}
	}
}

// TestUntarStaysInItsDestination: what a sandbox sends cannot write
// outside the destination, nor plant links there.
func TestUntarStaysInItsDestination(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []tar.Header{
		{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "d/ok", Typeflag: tar.TypeReg, Mode: 0o600, Size: 2},
		{Name: "d/../../escape", Typeflag: tar.TypeReg, Mode: 0o600, Size: 2},
		{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o600, Size: 2},
		{Name: "d/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		{Name: "d/hard", Typeflag: tar.TypeLink, Linkname: "d/ok"},
		{Name: "d/fifo", Typeflag: tar.TypeFifo},
	}
	for _, h := range entries {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("hi"))
		}
	}
	_ = tw.Close()
	dest := filepath.Join(t.TempDir(), "out")
	var warn bytes.Buffer
	n, err := untar(&buf, "d", dest, &warn)
	if err != nil || n != 1 {
		t.Fatalf("untar: %d files, %v", n, err)
	}
	wantFiles(t, dest, map[string]string{"ok": "hi"})
	ents, _ := os.ReadDir(dest)
	if len(ents) != 1 {
		t.Errorf("dest holds %d entries, want ok alone", len(ents))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dest), "escape")); !os.IsNotExist(err) {
		t.Errorf("an entry escaped: %v", err)
	}
	for _, w := range []string{`skipping "d/../../escape": outside d`, `skipping "/abs": outside d`,
		"skipping d/link: not a regular file", "skipping d/hard", "skipping d/fifo"} {
		contains(t, "warnings", warn.String(), w)
	}
}

func TestWriteTarRenamesAndGivesToRoot(t *testing.T) {
	src := t.TempDir()
	mkdirs(t, filepath.Join(src, "sub"))
	writeFiles(t, map[string]string{filepath.Join(src, "sub", "f"): "x"})
	if err := os.Symlink("f", filepath.Join(src, "sub", "l")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeTar(&buf, src, "dest", &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s belongs to %d:%d %q, want root", h.Name, h.Uid, h.Gid, h.Uname)
		}
		if h.Name == "dest/sub/l" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "f") {
			t.Errorf("symlink entry %+v", h)
		}
	}
	if got := strings.Join(names, " "); got != "dest/ dest/sub/ dest/sub/f dest/sub/l" {
		t.Errorf("entries %q", got)
	}
}

func TestCpArgs(t *testing.T) {
	cases := []struct {
		src, dst string
		from, to cpEnd
		err      string
	}{
		{src: "./a", dst: "box:/tmp/a", from: cpEnd{path: "./a"}, to: cpEnd{"box", "/tmp/a"}},
		{src: "box:/tmp/a", dst: "/x/y", from: cpEnd{"box", "/tmp/a"}, to: cpEnd{path: "/x/y"}},
		{src: "dir/a:b", dst: "box:rel", from: cpEnd{path: "dir/a:b"}, to: cpEnd{"box", "rel"}},
		{src: "a", dst: "b", err: "cp needs SANDBOX:PATH as SRC or DST, got two local paths: a b"},
		{src: "a:x", dst: "b:y", err: "both a:x and b:y name a sandbox"},
		{src: "box:", dst: "./x", err: "an empty path in box: ./x"},
		{src: ":x", dst: "y", err: "two local paths"},
	}
	for _, c := range cases {
		from, to, err := cpEnds(&cobra.Command{Example: "  example"}, c.src, c.dst)
		if c.err != "" {
			wantError(t, err, c.err)
			continue
		}
		if err != nil || from != c.from || to != c.to {
			t.Errorf("cp %s %s: %+v %+v %v", c.src, c.dst, from, to, err)
		}
	}
}

func TestTarFailed(t *testing.T) {
	wantError(t, tarFailed("copy x", &ExitError{Code: 2}, "tar: x: Cannot stat"), "copy x: tar exited with code 2: tar: x: Cannot stat")
	wantError(t, tarFailed("copy x", &ExitError{Code: 127}, "sh: tar: not found"), "tar did not run in the sandbox (exit code 127; cp needs tar")
	wantError(t, tarFailed("copy x", errors.New("connection reset"), ""), "copy x: connection reset")
}
