package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// TestLayoutConfine: on a shared store, open hands out a snapshot only
// when its manifest names files in the store (its base disk there too);
// one naming /etc/passwd as its memory is refused, ManifestRejected.
func TestLayoutConfine(t *testing.T) {
	local, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := &layout{store: local, shared: true}
	ctx := context.Background()
	commit := func(key string, files map[string]string, m *snapshot.Manifest) {
		t.Helper()
		dir := local.Dir(key)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o400); err != nil {
				t.Fatal(err)
			}
		}
		if m != nil {
			if err := m.Write(dir); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := local.Commit(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	commit("disks/x", map[string]string{baseDiskFile: "ext4"}, nil)
	snap := map[string]string{snapshot.StateFile: "s", snapshot.DiskFile: "d", snapshot.MemoryFile: "m"}
	manifest := func(memory string) *snapshot.Manifest {
		return &snapshot.Manifest{Version: snapshot.ManifestVersion, State: snapshot.FileRef{Path: snapshot.StateFile}, Disk: snapshot.FileRef{Path: snapshot.DiskFile},
			Memory: snapshot.FileRef{Path: memory}, BaseDisk: snapshot.FileRef{Path: "../../disks/x/" + baseDiskFile}}
	}
	commit("snapshots/ok", snap, manifest(snapshot.MemoryFile))
	_, release, err := l.open(ctx, "snapshots/ok")
	if err != nil {
		t.Fatalf("open of a confined snapshot: %v", err)
	}
	release()

	commit("snapshots/evil", snap, manifest("/etc/passwd"))
	_, _, err = l.open(ctx, "snapshots/evil")
	if refusal(err) != stageapi.ReasonManifestRejected || !strings.Contains(err.Error(), `memory "/etc/passwd"`) {
		t.Fatalf("open of a manifest naming /etc/passwd = %v (reason %q), want ManifestRejected naming the field", err, refusal(err))
	}
	t.Logf("refused: %v", err)
}
