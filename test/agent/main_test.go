// Package agent tests the node agent and the snapshot store on a real
// two-node cluster (internal/cluster) whose agents share one MinIO through
// the s3 store: snapshots and their remote status, pause and resume on
// the same node and on another, and the faults of the issue (an agent
// killed mid-snapshot, MinIO down during an upload, deletion of data a
// sandbox restores from). The juicefs backend is not exercised here: no
// JuiceFS can be installed on these machines (see nodeagent/store).
package agent

import (
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

// uploadDeadline bounds an upload before its data is remote Failed: short,
// so the MinIO-down test sees the bound.
const uploadDeadline = "40s"

func TestMain(m *testing.M) {
	sbxtest.Main(m, "agent", &c, func(_ crienv.T, _ string, o *cluster.Options) {
		o.MinIO = true // the chart's s3 store on the cluster's MinIO
		o.Values = agentValues()
	})
}

// s3 is the cluster's MinIO (tests stop and restart it).
func s3() *minio.Server { return c.MinIOServer }

// agentValues are the suite's chart values: the agents' s3 flags, and
// extra flags after them.
func agentValues(extra ...string) map[string]any {
	args := []any{"--s3-upload-deadline=" + uploadDeadline, "--s3-max-backoff=3s"}
	for _, a := range extra {
		args = append(args, a)
	}
	return map[string]any{"agent": map[string]any{"extraArgs": args}}
}
