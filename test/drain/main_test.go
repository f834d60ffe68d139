// Package drain drains a node of a real two-node cluster (sandlot
// installed by its chart, the s3 store on MinIO) the way an operator
// does, with `kubectl drain`: the sandboxes on it — one running a
// process an E2B client follows, one claimed from a warm pool, one
// paused, two plain, one mounting an E2B volume — move to the other node
// with their ID, memory and files (the client reconnects to its process;
// the volume is mounted again), the drain completes,
// and each sandbox's downtime is measured; then a drain that no sandbox
// can survive (the other node cordoned) is held by them, each saying
// why. `make test-drain` runs it.
package drain

import (
	"path/filepath"
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

// volumesDir is the chart's volumes.hostPath.
var volumesDir string

func TestMain(m *testing.M) {
	sbxtest.Main(m, "drain", &c, func(_ crienv.T, dir string, o *cluster.Options) {
		o.MinIO = true
		// Volumes on a directory both nodes of this one-machine cluster
		// mount: shared storage, as volumes.hostPath must be.
		volumesDir = filepath.Join(dir, "volumes")
		o.Values = map[string]any{"volumes": map[string]any{"hostPath": volumesDir}}
	})
}
