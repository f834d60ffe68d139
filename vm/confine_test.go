package vm

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

// confineFixture is a store with two snapshots (b restored from a), a
// shared base disk, an image cache and a secret outside all of them.
type confineFixture struct {
	store, images, snap, other, secret string
}

func newConfineFixture(t *testing.T) confineFixture {
	t.Helper()
	tmp := t.TempDir()
	f := confineFixture{store: filepath.Join(tmp, "store"), images: filepath.Join(tmp, "images"),
		secret: filepath.Join(tmp, "outside", "secret")}
	f.snap = filepath.Join(f.store, "snapshots", "b")
	f.other = filepath.Join(f.store, "snapshots", "a")
	for _, p := range []string{
		filepath.Join(f.snap, snapshot.StateFile), filepath.Join(f.snap, snapshot.DiskFile), filepath.Join(f.snap, snapshot.LayerFile),
		filepath.Join(f.other, snapshot.MemoryFile), filepath.Join(f.other, snapshot.StateFile),
		filepath.Join(f.store, "disks", "x", "base.ext4"), filepath.Join(f.images, "sha256-x.ext4"), f.secret,
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// manifest is a restored VM's snapshot, as makePortable leaves it.
func (f confineFixture) manifest() *snapshot.Manifest {
	return &snapshot.Manifest{State: snapshot.FileRef{Path: snapshot.StateFile}, Disk: snapshot.FileRef{Path: snapshot.DiskFile},
		Memory: snapshot.FileRef{Path: "../a/memory"}, MemoryLayer: &snapshot.FileRef{Path: snapshot.LayerFile},
		BaseDisk: snapshot.FileRef{Path: "../../disks/x/base.ext4"}}
}

func (f confineFixture) roots() Roots { return Roots{Store: f.store, Images: []string{f.images}} }

func TestConfine(t *testing.T) {
	f := newConfineFixture(t)
	link := func(name, target string) string {
		p := filepath.Join(f.snap, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return name
	}
	if err := unix.Mkfifo(filepath.Join(f.other, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	escape, inside := link("escape", f.secret), link("inside", filepath.Join(f.other, snapshot.MemoryFile))
	storeLink := filepath.Join(t.TempDir(), "store-link")
	if err := os.Symlink(f.store, storeLink); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		edit   func(m *snapshot.Manifest)
		roots  []Roots
		field  string // "" : allowed
		reason string
	}{
		{"relative inside, ../other inside the store", func(m *snapshot.Manifest) {}, nil, "", ""},
		{"absolute inside the store", func(m *snapshot.Manifest) { m.Memory.Path = filepath.Join(f.other, snapshot.MemoryFile) }, nil, "", ""},
		{"base disk in the image cache", func(m *snapshot.Manifest) { m.BaseDisk.Path = filepath.Join(f.images, "sha256-x.ext4") }, nil, "", ""},
		{"symlink that stays inside", func(m *snapshot.Manifest) { m.Memory.Path = inside }, nil, "", ""},
		{"store root behind a symlink", func(m *snapshot.Manifest) {}, []Roots{{Store: storeLink}}, "", ""},
		{"no roots: ../other refused", func(m *snapshot.Manifest) {}, []Roots{}, "memory", "no store or image roots"},
		{"absolute outside", func(m *snapshot.Manifest) { m.Memory.Path = f.secret }, nil, "memory", "outside"},
		{"/etc/shadow as base disk", func(m *snapshot.Manifest) { m.BaseDisk.Path = "/etc/shadow" }, nil, "baseDisk", ""},
		{"relative escape", func(m *snapshot.Manifest) { m.BaseDisk.Path = "../../../outside/secret" }, nil, "baseDisk", "outside"},
		{"symlink escaping", func(m *snapshot.Manifest) { m.Memory.Path = escape }, nil, "memory", "resolves to " + f.secret},
		{"memory from the image cache", func(m *snapshot.Manifest) { m.Memory.Path = filepath.Join(f.images, "sha256-x.ext4") }, nil, "memory", "outside"},
		{"state of another snapshot", func(m *snapshot.Manifest) { m.State.Path = "../a/state" }, nil, "state", "outside"},
		{"layer outside its snapshot", func(m *snapshot.Manifest) { m.MemoryLayer.Path = "../a/memory" }, nil, "memoryLayer", "outside"},
		{"nbd protocol", func(m *snapshot.Manifest) { m.BaseDisk.Path = "nbd:127.0.0.1:10809" }, nil, "baseDisk", "protocol"},
		{"file: protocol", func(m *snapshot.Manifest) { m.Memory.Path = "file:/etc/shadow" }, nil, "memory", "protocol"},
		{"json: protocol", func(m *snapshot.Manifest) { m.BaseDisk.Path = `json:{"file":{"driver":"file"}}` }, nil, "baseDisk", "protocol"},
		{"comma", func(m *snapshot.Manifest) { m.Memory.Path = "../a/memory,share=on" }, nil, "memory", "','"},
		{"device (as /dev/kvm)", func(m *snapshot.Manifest) { m.BaseDisk.Path = "/dev/null" }, []Roots{{Store: f.store, Images: []string{"/dev"}}}, "baseDisk", "not a regular file"},
		{"fifo inside the store", func(m *snapshot.Manifest) { m.Memory.Path = "../a/fifo" }, nil, "memory", "not a regular file"},
		{"directory", func(m *snapshot.Manifest) { m.Memory.Path = "../a" }, nil, "memory", "not a regular file"},
		{"empty path", func(m *snapshot.Manifest) { m.Disk.Path = "" }, nil, "disk", "empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := f.manifest()
			tc.edit(m)
			roots := tc.roots
			if roots == nil {
				roots = []Roots{f.roots()}
			}
			err := Confine(m, f.snap, roots...)
			checkConfined(t, err, tc.field, tc.reason)
		})
	}
}

func checkConfined(t *testing.T, err error, field, reason string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("Confine: %v, want allowed", err)
		}
		return
	}
	var ce *ConfineError
	if !errors.As(err, &ce) {
		t.Fatalf("Confine = %v, want a *ConfineError for %s", err, field)
	}
	if ce.Field != field || !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), strconv.Quote(ce.Path)) {
		t.Fatalf("Confine = %q, want field %s named with its path, saying %q", err, field, reason)
	}
	t.Logf("%v", err)
}

// TestConfineMissingFile: a missing file is an ordinary error (the restore
// says which), not a refused manifest.
func TestConfineMissingFile(t *testing.T) {
	f := newConfineFixture(t)
	m := f.manifest()
	m.Memory.Path = "../gone/memory"
	err := Confine(m, f.snap, f.roots())
	var ce *ConfineError
	if err == nil || errors.As(err, &ce) || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("Confine = %v, want a not-exist error naming memory", err)
	}
}

func TestConfineRelativeRoot(t *testing.T) {
	f := newConfineFixture(t)
	if err := Confine(f.manifest(), f.snap, Roots{Store: "store"}); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Fatalf("Confine with a relative root = %v", err)
	}
}
