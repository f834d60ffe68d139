package vm

import (
	"bytes"
	"os"
	"path/filepath"
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
