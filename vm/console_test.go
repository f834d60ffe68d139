package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCappedLog: a flood keeps at most two files of the cap, the newest
// bytes last, and the tail reads across the rotation.
func TestCappedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	c := &cappedLog{path: path, max: 1000}
	flood := bytes.Repeat([]byte("0123456789"), 1050) // 10.5 caps
	if err := c.copyFrom(bytes.NewReader(flood)); err != nil {
		t.Fatal(err)
	}
	c.close()
	cur, _ := os.ReadFile(path)
	prev, _ := os.ReadFile(path + ".1")
	if len(cur) != 500 || len(prev) != 1000 {
		t.Fatalf("log sizes: current %d, rotated %d; want 500 and 1000", len(cur), len(prev))
	}
	if got, want := consoleTail(path), flood[len(flood)-1500:]; !bytes.Equal(got, want) {
		t.Fatalf("tail across the rotation: %q", got)
	}
	if _, err := os.Stat(path + ".2"); !os.IsNotExist(err) {
		t.Fatalf("a third file: %v", err)
	}
}
