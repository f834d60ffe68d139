// Package jfsagent tests the node agent with the juicefs store on a real
// two-node cluster (internal/cluster) installed the way docs/install.md tells
// a bare-metal user: sandlot's chart in store mode juicefs, its PVC a
// static PV of the JuiceFS CSI driver (v0.32.4, node plugin mounting by
// process, from upstream's manifests) on one live volume (Redis, a MinIO
// bucket); each node's client has its own writeback staging. Snapshots
// whose remote status comes from the writer's client, pause on one node
// and resume on the other read in place from the volume, and the metadata
// engine restarting and the agents' pods being replaced under running
// VMs. The store's own faults (MinIO down past the deadline, a steady
// writer, tampering) are in test/juicefs.
package jfsagent

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/juicefs"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

func TestMain(m *testing.M) {
	sbxtest.Main(m, "jfsagent", &c, func(t crienv.T, dir string, o *cluster.Options) {
		// Node directories are named after the nodes in a chart cluster:
		// a short root keeps the shims' socket paths short.
		short, err := os.MkdirTemp("/var/tmp", "sj-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(short) })
		if err := enoughFreeSpace(short); err != nil {
			t.Fatal(err)
		}
		o.Dir, o.MinIO, o.JuiceFSCSI, o.ClusterDNS = short, true, true, true
	})
}

// mount is a node's JuiceFS CSI mount as the host sees it: the
// sandlot-store pod's volume (where the agent and the VMs find the store)
// and its client's metrics (in the node's CSI node plugin pod).
type mount struct {
	Dir        string
	MetricsURL string
}

func mountOf(t *testing.T, node string) mount {
	t.Helper()
	dir, err := c.JuiceFSStoreDir(node)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{
		LabelSelector: "app=juicefs-csi-node", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("%s's CSI node plugin: %v", node, err)
	}
	return mount{Dir: dir, MetricsURL: c.JuiceFSMetricsURL(pods.Items[0].Status.PodIP)}
}

func (m mount) Metric(name, match string) (float64, error) {
	return juicefs.Metric(m.MetricsURL, name, match)
}

func (m mount) String() string { return fmt.Sprintf("%s (metrics %s)", m.Dir, m.MetricsURL) }

// minFreeRatio is the free share of the nodes' disk the tests need:
// JuiceFS stages writes (its writeback) only above its free-space-ratio
// (the harness's PV sets 0.03); below, a write waits for the object store,
// and the tests that stop MinIO hang without saying why.
const minFreeRatio = 0.06

func enoughFreeSpace(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("free space of %s: %w", dir, err)
	}
	if free := float64(st.Bavail) / float64(st.Blocks); free < minFreeRatio {
		return fmt.Errorf("%s's disk is %.0f%% free, below the %.0f%% these tests need (JuiceFS stages writes only above "+
			"3%% free here): free space (make down deletes a local cluster's data)", dir, 100*free, 100*minFreeRatio)
	}
	return nil
}
