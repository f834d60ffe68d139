package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestDeletedNodesSnapshotCanBeDeleted: a node fails (kubelet and agent
// gone) and its Node object is deleted; its remote-Ready Snapshot's
// deletion is handed to the other node's agent and completes, the bucket
// emptied, instead of waiting forever for an agent that is gone.
// The node comes back afterwards.
func TestDeletedNodesSnapshotCanBeDeleted(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbx := sbxtest.Create(t, k, "small", "orphan-src")["orphan-src"]
	snap := sbxtest.Snapshot(t, k, "orphan-snap", sbx.Name)
	sbxtest.WaitData(t, k, snap, 2*time.Minute, "remote Ready", sbxtest.RemoteReady)
	// The sandbox's pod goes with the node: its cleanup waits for that.
	a, b := sbx.Status.NodeName, sbxtest.OtherNode(c, sbx.Status.NodeName)
	t.Cleanup(func() { bringBack(t, a) })
	if err := c.KillKubelet(a); err != nil {
		t.Fatal(err)
	}
	// bringBack (its cleanup) starts it again once the kubelet runs.
	if err := c.StopAgent(a); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a}}); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	// Deleted with its node gone: handed to the other node's agent, which
	// removes the data from the bucket and lets it go.
	poll.Eventually(t, 2*time.Minute, "the snapshot gone (handed to "+b+")", func() error {
		err := k.Get(context.Background(), client.ObjectKeyFromObject(snap), snap)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there on %q, phase %s (%v)", snap.Status.NodeName, snap.Status.Phase, err)
	})
	poll.Eventually(t, time.Minute, "its objects gone from the bucket", func() error {
		if n := len(objects(t, "snapshots/"+string(snap.UID))); n > 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
}

// bringBack restarts a killed node's kubelet (it registers the Node
// again) and agent, so later tests have both nodes.
func bringBack(t *testing.T, node string) {
	t.Helper()
	if err := c.RestartKubelet(node); err != nil {
		t.Errorf("restart the kubelet of %s: %v", node, err)
	}
	if err := c.StartAgent(node); err != nil {
		t.Errorf("start the agent of %s again: %v", node, err)
	}
	k := sbxtest.Client(t, c)
	poll.Eventually(t, 2*time.Minute, node+" back as a runtime node", func() error {
		var n corev1.Node
		if err := k.Get(context.Background(), client.ObjectKey{Name: node}, &n); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("not registered yet")
			}
			return err
		}
		if n.Labels[sandlotv1.LabelRuntime] != "true" {
			return fmt.Errorf("labels %v", n.Labels)
		}
		return nil
	})
}
