// Package jfsagent tests the node agent with the juicefs store on a real
// two-node cluster (test/cluster) whose nodes each mount one live JuiceFS
// volume (test/juicefs: Redis, a MinIO bucket, a client per node with its
// own writeback staging): snapshots whose remote status comes from the
// writer's client, pause on one node and resume on the other read in
// place from the volume, and the metadata engine and the agents
// restarting under running VMs. The store's own faults (MinIO down, a
// steady writer) are in test/juicefs.
package jfsagent

import (
	"path/filepath"
	"testing"

	"github.com/sandlot-dev/sandlot/test/cluster"
	"github.com/sandlot-dev/sandlot/test/crienv"
	"github.com/sandlot-dev/sandlot/test/juicefs"
	"github.com/sandlot-dev/sandlot/test/minio"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var (
	c      *cluster.Cluster
	s3     *minio.Server
	vol    *juicefs.Volume
	mounts = map[string]*juicefs.Mount{}
)

func TestMain(m *testing.M) {
	sbxtest.Main(m, "jfsagent", &c, func(t crienv.T, dir string, o *cluster.Options) {
		s3 = minio.StartIn(t, filepath.Join(dir, "minio"))
		vol = juicefs.Start(t, filepath.Join(dir, "jfs"), s3)
		o.JuiceFS = map[string]cluster.JuiceFSMount{}
		for i := 1; i <= o.Nodes; i++ {
			name := cluster.NodeName(i)
			m := vol.Mount(name)
			mounts[name] = m
			o.JuiceFS[name] = cluster.JuiceFSMount{Dir: m.Dir, StagingDir: m.StagingDir, MetricsURL: m.MetricsURL}
		}
	})
}
