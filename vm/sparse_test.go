package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopyNonZeroKeepsHoles: the fallback copy (a source whose holes
// SEEK_DATA cannot see) writes the data and leaves zero runs as holes.
func TestCopyNonZeroKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	const size = 16 << 20
	want := make([]byte, size)
	copy(want[3<<20:], bytes.Repeat([]byte("data"), 1<<18)) // 1 MiB of data at 3 MiB
	want[size-1] = 7                                        // and a byte in the last MiB
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, want, 0o600); err != nil { // written in full: no holes
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(dir, "dst")
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := copyNonZero(out, in, 0, size); err != nil {
		t.Fatal(err)
	}
	out.Close()
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copy differs (%v)", err)
	}
	if a := allocated(dst); a > 3<<20 {
		t.Fatalf("copy allocates %d bytes, want the 2 MiB of data chunks at most", a)
	}
}

// The disk layer is sealed by its data extents: Verify reads those, and
// a changed byte in one is caught; a sparse copy keeps what it checks.
func TestDiskLayerSealedByItsExtents(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "layer")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{1 << 20, 40 << 20} {
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xab}, 8192), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	snap := filepath.Join(dir, "snap")
	if err := os.Mkdir(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	m := &Manifest{Version: ManifestVersion}
	if m.DiskExtents, err = copySparse(src, filepath.Join(snap, DiskFile), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{StateFile, MemoryFile} {
		if err := os.WriteFile(filepath.Join(snap, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, ref := range map[string]*FileRef{StateFile: &m.State, MemoryFile: &m.Memory} {
		if *ref, err = fileRef(snap, name); err != nil {
			t.Fatal(err)
		}
	}
	if m.Disk, err = dataRef(snap, DiskFile, m.DiskExtents); err != nil {
		t.Fatal(err)
	}
	if m.Disk.SHA256 != "" || len(m.Disk.DataSHA256) != 64 || m.Disk.Size != 64<<20 {
		t.Fatalf("disk ref %+v: want its data extents' sha256 and its full size", m.Disk)
	}
	if err := m.Write(snap); err != nil {
		t.Fatal(err)
	}
	if err := Verify(snap); err != nil {
		t.Fatalf("intact snapshot: %v", err)
	}
	disk, err := os.OpenFile(filepath.Join(snap, DiskFile), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := disk.WriteAt([]byte{0xac}, 40<<20+100); err != nil {
		t.Fatal(err)
	}
	disk.Close()
	if err := Verify(snap); err == nil || !strings.Contains(err.Error(), DiskFile+" changed") {
		t.Fatalf("a byte changed in an extent: %v, want the disk named", err)
	}
}

// A snapshot staged on the node (its store is a FUSE mount) moves into
// the store whole: the files by their extents, the manifest last; what
// arrives verifies and the disk layer is still sparse.
func TestPublishSnapshotFromStaging(t *testing.T) {
	root := t.TempDir()
	stage, dir := filepath.Join(root, "stage"), filepath.Join(root, "store")
	for _, d := range []string{stage, dir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	layer := filepath.Join(root, "layer")
	if err := os.WriteFile(layer, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(layer, 256<<20); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(layer, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 1<<20), 100<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	m := &Manifest{Version: ManifestVersion}
	if m.DiskExtents, err = copySparse(layer, filepath.Join(stage, DiskFile), 0o400); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{StateFile, MemoryFile} {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(name+" bytes"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	if m.State, err = fileRef(stage, StateFile); err != nil {
		t.Fatal(err)
	}
	if m.Memory, err = fileRef(stage, MemoryFile); err != nil {
		t.Fatal(err)
	}
	if m.Disk, err = dataRef(stage, DiskFile, m.DiskExtents); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(stage); err != nil {
		t.Fatal(err)
	}
	if err := publishSnapshot(stage, dir, m); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); err != nil {
		t.Fatalf("published snapshot: %v", err)
	}
	if got := allocated(filepath.Join(dir, DiskFile)); got > 4<<20 {
		t.Fatalf("published disk layer takes %d bytes: holes filled", got)
	}
}
