// Package isolation tries the sandbox boundary the way a tenant would, on
// a real two-node cluster (internal/cluster) whose agents share one MinIO (s3
// store): from a QEMU's own uid and mount namespace, from inside guests
// (a full disk, a console flood, more memory than the pod may have), as a
// namespace user with `edit` rights, with a tampered object in the bucket,
// against a warm pool VM before its claim, and through sandlot-api.
package isolation

import (
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

func TestMain(m *testing.M) {
	sbxtest.Main(m, "isolation", &c, func(_ crienv.T, _ string, o *cluster.Options) {
		o.MinIO = true // the chart's s3 store on the cluster's MinIO
		// A second team with keys of its own: the attacker of teams_test.go.
		o.Teams = []string{teamB}
	})
}
