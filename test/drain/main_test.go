// Package drain drains a node of a real two-node cluster (sandlot
// installed by its chart, the s3 store on MinIO) the way an operator
// does, with `kubectl drain`: the sandboxes on it — one running a
// process an E2B client follows, one claimed from a warm pool, one
// paused, two plain — move to the other node with their ID, memory and
// files (the client reconnects to its process), the drain completes,
// and each sandbox's downtime is measured; then a drain that no sandbox
// can survive (the other node cordoned) is held by them, each saying
// why. `make test-drain` runs it.
package drain

import (
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

func TestMain(m *testing.M) {
	sbxtest.Main(m, "drain", &c, func(_ crienv.T, _ string, o *cluster.Options) { o.MinIO = true })
}
