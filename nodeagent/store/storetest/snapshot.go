package storetest

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// Snapshot is what Write put in a key's dir, to check copies against.
type Snapshot struct {
	Key   string
	Files []File
}

// File is one snapshot file: Data bytes from a seeded generator, then
// zeros (a hole in disk.raw) up to Size.
type File struct {
	Name       string
	Size, Data int64
	Seed       uint64
}

// Bytes is the sum of the files' sizes (what Info.Bytes reports).
func (s Snapshot) Bytes() int64 {
	var n int64
	for _, f := range s.Files {
		n += f.Size
	}
	return n
}

// Write writes a snapshot the way the VM layer does (dir 0700, files
// 0400, fsynced) into s.Dir(key): memory holds size random bytes, disk.raw
// is sparse.
func Write(t *testing.T, p Pair, s store.Store, key string, size int64) Snapshot {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(key))
	seed := h.Sum64()
	snap := Snapshot{Key: key, Files: []File{
		{Name: "manifest.json", Size: 700, Data: 700, Seed: seed},
		{Name: "state", Size: 64 << 10, Data: 64 << 10, Seed: seed + 1},
		{Name: "memory", Size: size, Data: size, Seed: seed + 2},
		{Name: "disk.raw", Size: max(size, 1<<20), Data: 64 << 10, Seed: seed + 3},
	}}
	dir := s.Dir(key)
	if dir == "" {
		t.Fatalf("Dir(%q) is empty", key)
	}
	for _, f := range snap.Files {
		if err := f.write(filepath.Join(dir, f.Name)); err != nil {
			t.Fatalf("write snapshot %s: %v", key, err)
		}
	}
	if p.AfterWrite != nil {
		p.AfterWrite(s, dir)
	}
	return snap
}

func (f File) reader() io.Reader {
	var seed [32]byte
	for i := range 4 {
		seed[i*8] = byte(f.Seed >> (8 * i))
	}
	return io.LimitReader(rand.NewChaCha8(seed), f.Data)
}

func (f File) write(p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if _, err := io.CopyBuffer(out, f.reader(), make([]byte, 1<<20)); err != nil {
		return err
	}
	if err := out.Truncate(f.Size); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return out.Chmod(0o400)
}

// writeFile writes size random bytes at p (for the disk-full case).
func writeFile(p string, size int64, seed uint64) error {
	return File{Size: size, Data: size, Seed: seed}.write(p)
}

// Check compares dir with the snapshot byte for byte, modes included, and
// refuses extra files.
func (s Snapshot) Check(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: mode %v, want a 0700 dir", dir, fi.Mode())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names, want []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	for _, f := range s.Files {
		want = append(want, f.Name)
		if err := f.check(filepath.Join(dir, f.Name)); err != nil {
			t.Fatalf("snapshot %s: %v", s.Key, err)
		}
	}
	sort.Strings(want)
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("%s holds %v, want %v", dir, names, want)
	}
}

func (f File) check(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.Size() != f.Size || fi.Mode().Perm() != 0o400 {
		return fmt.Errorf("%s: %d bytes, mode %v; want %d bytes, 0400", p, fi.Size(), fi.Mode().Perm(), f.Size)
	}
	got, err := os.Open(p)
	if err != nil {
		return err
	}
	defer got.Close()
	want := io.MultiReader(f.reader(), io.LimitReader(zeros{}, f.Size-f.Data))
	a, b := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); off < f.Size; {
		n := min(int64(len(a)), f.Size-off)
		if _, err := io.ReadFull(got, a[:n]); err != nil {
			return fmt.Errorf("%s at %d: %w", p, off, err)
		}
		if _, err := io.ReadFull(want, b[:n]); err != nil {
			return err
		}
		if !bytes.Equal(a[:n], b[:n]) {
			return fmt.Errorf("%s differs in bytes %d-%d", p, off, off+n)
		}
		off += n
	}
	return nil
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
