package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/vm"
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
	commit := func(key string, files map[string]string, m *vm.Manifest) {
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
	snap := map[string]string{vm.StateFile: "s", vm.DiskFile: "d", vm.MemoryFile: "m"}
	manifest := func(memory string) *vm.Manifest {
		return &vm.Manifest{Version: vm.ManifestVersion, State: vm.FileRef{Path: vm.StateFile}, Disk: vm.FileRef{Path: vm.DiskFile},
			Memory: vm.FileRef{Path: memory}, BaseDisk: vm.FileRef{Path: "../../disks/x/" + baseDiskFile}}
	}
	commit("snapshots/ok", snap, manifest(vm.MemoryFile))
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
