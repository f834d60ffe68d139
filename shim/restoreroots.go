package shim

import (
	"path/filepath"
	"strings"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	"github.com/sandlot-dev/sandlot/vm"
)

// restoreRoots is where the manifest of the snapshot in dir may name
// files: the store it is in and the node's image cache. The store root is
// the agent's word when it staged the data; otherwise (a rollback's
// directory, a restore-location on this node) it is what dir's store key
// leaves, or dir's parent for a directory outside any store.
func restoreRoots(dir, storeRoot string, cfg node.Config) vm.Roots {
	if storeRoot == "" {
		storeRoot = filepath.Dir(dir)
		for _, kind := range []string{"Snapshot", "PausedSandbox"} {
			key, err := stageapi.Key(kind, filepath.Base(dir))
			if root, ok := strings.CutSuffix(dir, "/"+key); err == nil && ok {
				storeRoot = root
			}
		}
	}
	return vm.Roots{Store: storeRoot, Images: []string{cfg.ImageDir}}
}
