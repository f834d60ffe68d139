package vm

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPrivatePages checks the mechanism a restored VM's snapshot rests on:
// in a MAP_PRIVATE file mapping, pages written read present and not
// file-backed; pages only read stay the file's.
func TestPrivatePages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mem")
	if err := os.WriteFile(path, make([]byte, 64*pageSize), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 64*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for _, p := range []int{1, 2, 3, 10, 40} {
		mem[p*pageSize] = 7 // written: copied on write
	}
	_ = mem[20*pageSize] + mem[30*pageSize] // read only: stays the file's
	link := filepath.Join(filepath.Dir(path), "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	m, err := findMapping(os.Getpid(), link) // by inode: a symlink finds it too
	if err != nil {
		t.Fatal(err)
	}
	pages, err := privatePages(os.Getpid(), m)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 2, 3, 10, 40}; !slices.Equal(pages, want) {
		t.Fatalf("private pages = %v, want %v", pages, want)
	}
	if got := runs(pages); !slices.Equal(got, [][2]int64{{1, 4}, {10, 11}, {40, 41}}) {
		t.Fatalf("runs = %v", got)
	}
}

// TestLayerRoundTrip captures a process's private pages and lays them over
// a fresh private mapping of the same base.
func TestLayerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	if err := os.WriteFile(base, make([]byte, 32*pageSize), 0o444); err != nil {
		t.Fatal(err)
	}
	mapBase := func() []byte {
		f, err := os.Open(base)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		mem, err := unix.Mmap(int(f.Fd()), 0, 32*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(mem) })
		return mem
	}
	a := mapBase()
	copy(a[5*pageSize:], "hello")
	copy(a[6*pageSize+100:], "world")
	m, _ := findMapping(os.Getpid(), base)
	if m.End-m.Start != 32*pageSize {
		t.Fatalf("mapping %+v", m)
	}
	captured, err := captureLayer(os.Getpid(), m, filepath.Join(dir, "layer"))
	if err != nil || !slices.Equal(captured, [][2]int64{{5, 7}}) {
		t.Fatalf("captured runs %v, %v", captured, err)
	}
	unix.Munmap(a)
	b := mapBase()
	m2, _ := findMapping(os.Getpid(), base)
	applied, err := applyLayer(os.Getpid(), m2, filepath.Join(dir, "layer"), captured)
	if err != nil || applied != 2*pageSize {
		t.Fatalf("applied %d, %v", applied, err)
	}
	if string(b[5*pageSize:5*pageSize+5]) != "hello" || string(b[6*pageSize+100:6*pageSize+105]) != "world" {
		t.Fatal("layer pages not restored")
	}
	if sum, _ := os.ReadFile(base); string(sum[5*pageSize:5*pageSize+5]) == "hello" {
		t.Fatal("the base file was written")
	}
	if _, err := applyLayer(os.Getpid(), m2, filepath.Join(dir, "layer"), [][2]int64{{30, 40}}); err == nil {
		t.Fatal("a run past the end of guest RAM was applied")
	}
}
