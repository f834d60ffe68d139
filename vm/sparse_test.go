package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandlot-dev/sandlot/api/snapshot"
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
	m := &snapshot.Manifest{Version: snapshot.ManifestVersion}
	if m.DiskExtents, err = copySparse(layer, filepath.Join(stage, snapshot.DiskFile), 0o400); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{snapshot.StateFile, snapshot.MemoryFile} {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(name+" bytes"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	if m.State, err = snapshot.NewFileRef(stage, snapshot.StateFile); err != nil {
		t.Fatal(err)
	}
	if m.Memory, err = snapshot.NewFileRef(stage, snapshot.MemoryFile); err != nil {
		t.Fatal(err)
	}
	if m.Disk, err = snapshot.NewDataRef(stage, snapshot.DiskFile, m.DiskExtents); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(stage); err != nil {
		t.Fatal(err)
	}
	if err := publishSnapshot(stage, dir, m); err != nil {
		t.Fatal(err)
	}
	if err := snapshot.Verify(dir); err != nil {
		t.Fatalf("published snapshot: %v", err)
	}
	if got := allocated(filepath.Join(dir, snapshot.DiskFile)); got > 4<<20 {
		t.Fatalf("published disk layer takes %d bytes: holes filled", got)
	}
}
