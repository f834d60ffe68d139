package store_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// The cluster's key in these tests, and another cluster's.
var (
	clusterKey = bytes.Repeat([]byte("k"), 64)
	otherKey   = bytes.Repeat([]byte("x"), 64)
)

func testKeys(t testing.TB) *store.Keys {
	t.Helper()
	k, err := store.NewKeys(clusterKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestReadKeys(t *testing.T) {
	dir := t.TempDir()
	cur, prev := filepath.Join(dir, "key"), filepath.Join(dir, "previous")
	if err := os.WriteFile(cur, append(clusterKey, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := store.ReadKeys(cur, prev) // no previous key: fine
	if err != nil || len(k.IDs()) != 1 {
		t.Fatalf("ReadKeys without a previous key = %v, %v", k, err)
	}
	if err := os.WriteFile(prev, otherKey, 0o600); err != nil {
		t.Fatal(err)
	}
	k, err = store.ReadKeys(cur, prev)
	if err != nil || len(k.IDs()) != 2 || k.IDs()[0] != testKeys(t).IDs()[0] {
		t.Fatalf("ReadKeys = %v, %v; want the current key (newline trimmed) then the previous", k.IDs(), err)
	}
	if err := os.WriteFile(cur, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ReadKeys(cur, ""); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("ReadKeys of a short key = %v", err)
	}
	if _, err := store.ReadKeys(filepath.Join(dir, "missing"), ""); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadKeys of a missing key = %v", err)
	}
}

func TestKeysRotation(t *testing.T) {
	oldK, _ := store.NewKeys(otherKey, nil)
	rotated, _ := store.NewKeys(clusterKey, otherKey)
	data := []byte(`{"version":1}`)
	sig := store.Sign(oldK, "snapshots/a", data)
	if err := store.Verify(rotated, "snapshots/a", data, sig); err != nil {
		t.Fatalf("the previous key's signature refused during a rotation: %v", err)
	}
	if err := store.Verify(testKeys(t), "snapshots/a", data, sig); !errors.Is(err, store.ErrIntegrity) || !strings.Contains(err.Error(), "does not hold") {
		t.Fatalf("a signature by a key not held = %v", err)
	}
	if err := store.Verify(rotated, "snapshots/b", data, sig); !errors.Is(err, store.ErrIntegrity) {
		t.Fatalf("a signature replayed under another key name = %v", err)
	}
	if err := store.Verify(rotated, "snapshots/a", []byte(`{"version":2}`), sig); !errors.Is(err, store.ErrIntegrity) {
		t.Fatalf("changed data = %v", err)
	}
	if sig := store.Sign(rotated, "snapshots/a", data); !strings.Contains(sig, rotated.IDs()[0]) {
		t.Fatalf("signature %s is not by the current key %s", sig, rotated.IDs()[0])
	}
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
