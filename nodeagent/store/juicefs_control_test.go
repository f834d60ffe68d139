package store_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// TestControlFileMustBeTheClients: an ordinary file named like the
// client's control file (what a writer of the volume could plant next to
// a snapshot, with a forged answer in it) is not asked.
func TestControlFileMustBeTheClients(t *testing.T) {
	dir := t.TempDir()
	// The agent's 19-byte request overwrites the file's start; it then
	// reads on from there.
	forged := strings.Repeat("x", 19) + "\xff\x00\x00\x00\x0e" + `{"Objects":[]}`
	for _, name := range []string{".jfs.control", ".control"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(forged), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "memory"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := store.JuiceFSObjects(ctx, filepath.Join(dir, "memory"))
	if err == nil || !strings.Contains(err.Error(), "not one") {
		t.Fatalf("JuiceFSObjects beside planted control files = %v, %v; want them refused", objs, err)
	}
}
