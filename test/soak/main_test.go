// Package soak runs sandlot for minutes under mixed churn while a fault
// schedule breaks its parts, on a real two-node cluster installed by its
// chart (the s3 store on MinIO): sandboxes are created, commanded, given
// files, paused and resumed (through the E2B API and kubectl),
// snapshotted and started from their snapshots, forked, rolled back and
// killed, while agent pods, the controller, the API, a node's
// containerd, MinIO and a node's kubelet are killed in turn. Every
// operation is accounted for (ok, failed with a reason inside a fault
// window, or lost), every leak after the run is counted, and the run is
// drawn (latency per operation over time with the faults marked).
//
// `make test` runs the short form (SOAK_MIN unset: 5 minutes, four
// faults); `make soak SOAK_MIN=30` the long one, writing its PNG and
// table to docs/ (SOAK_OUT).
package soak

import (
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

func TestMain(m *testing.M) {
	sbxtest.Main(m, "soak", &c, func(_ crienv.T, _ string, o *cluster.Options) { o.MinIO = true })
}
