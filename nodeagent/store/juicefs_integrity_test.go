package store_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

// TestJuiceFSIntegrity: a writer of the shared volume changes a committed
// key; Open refuses it with ErrIntegrity, on the committing node too (the
// bytes come from the volume), until the data is what was signed again.
func TestJuiceFSIntegrity(t *testing.T) {
	cases := []struct {
		name string
		edit func(t *testing.T, mount, dir string)
		want string
	}{
		{"flipped byte", func(t *testing.T, _, dir string) { flipByte(t, filepath.Join(dir, "memory")) }, "memory of snapshots/jfs"},
		{"edited manifest", func(t *testing.T, _, dir string) {
			rewrite(t, filepath.Join(dir, "manifest.json"), []byte(`{"version":1,"memory":{"path":"/etc/passwd"}}`))
		}, "manifest.json of snapshots/jfs"},
		{"extra file", func(t *testing.T, _, dir string) { rewrite(t, filepath.Join(dir, "memory.layer"), []byte("x")) }, "its signed record lists"},
		{"record removed", func(t *testing.T, mount, _ string) { os.Remove(recordPath(mount)) }, "no signed record"},
		{"record signed by another key", func(t *testing.T, mount, _ string) { resignRecord(t, mount) }, "which this node does not hold"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mount := t.TempDir()
			a, _ := jfsNode(t, mount, "node-a")
			b, _ := jfsNode(t, mount, "node-b")
			key := "snapshots/jfs"
			want := storetest.Write(t, storetest.Pair{}, a, key, 4<<20)
			if _, err := a.Commit(ctx, key); err != nil {
				t.Fatal(err)
			}
			storetest.WaitReady(t, a, key, 10*time.Second)
			dir, release, err := b.Open(ctx, key)
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			release()
			want.Check(t, dir)
			tc.edit(t, mount, dir)
			for node, s := range map[string]*store.JuiceFS{"reader": b, "committer": a} {
				_, _, err := s.Open(ctx, key)
				if !errors.Is(err, store.ErrIntegrity) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%s's Open after the edit = %v, want IntegrityCheckFailed saying %q", node, err, tc.want)
				}
				t.Logf("%s refused: %v", node, err)
			}
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("the refusal removed data on the shared volume: %v", err)
			}
		})
	}
}

func recordPath(mount string) string {
	return filepath.Join(mount, ".sandlot-store", "signed", url.PathEscape("snapshots/jfs")+".json")
}

func flipByte(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x80
	rewrite(t, p, b)
}

// rewrite replaces p's content in place (same inode), as a writer of the
// volume would.
func rewrite(t *testing.T, p string, data []byte) {
	t.Helper()
	os.Chmod(p, 0o600)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// resignRecord signs the genuine record again with another cluster's key.
func resignRecord(t *testing.T, mount string) {
	t.Helper()
	var env struct {
		Record json.RawMessage `json:"record"`
	}
	data, err := os.ReadFile(recordPath(mount))
	if err == nil {
		err = json.Unmarshal(data, &env)
	}
	if err != nil {
		t.Fatal(err)
	}
	other, _ := store.NewKeys(otherKey, nil)
	forged, _ := json.Marshal(map[string]any{"record": env.Record, "signature": store.SignRecord(other, "snapshots/jfs", env.Record)})
	rewrite(t, recordPath(mount), forged)
}
