package controllers_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestDeletedNodesData: Snapshots whose Node was deleted do not hang in
// Terminating. With a remote copy the deletion goes to another node's
// agent (label and status move to it); without one the data is Lost and
// the Snapshot goes, with a Warning Event.
func TestDeletedNodesData(t *testing.T) {
	h := newHarness(t)
	startController(t)
	h.addNode("doomed", "8", "16Gi", nil)
	h.addNode("heir", "8", "16Gi", nil)
	remote := h.readySnapshot("remote", "doomed", sandlotv1.RemoteReady, 512)
	local := h.readySnapshot("local", "doomed", sandlotv1.RemoteNotApplicable, 512)
	for _, s := range []*sandlotv1.Snapshot{remote, local} {
		h.addDataFinalizer(s) // as the doomed node's agent did
		if err := h.c.Delete(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}); err != nil {
		t.Fatal(err)
	}
	h.gone(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "local"}})
	h.eventually(10*time.Second, "the lost data's Event", func() error { return h.hasEvent(local.UID, sandlotv1.ReasonDataLost) })
	h.eventually(10*time.Second, "the remote copy's deletion handed to heir", func() error {
		got := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key("remote"), got); err != nil {
			return err
		}
		if got.Labels[sandlotv1.LabelNode] != "heir" || got.Status.NodeName != "heir" {
			return errorf("label %q, status node %q", got.Labels[sandlotv1.LabelNode], got.Status.NodeName)
		}
		return nil
	})
	// heir's agent deletes the remote copy and lets the Snapshot go.
	h.eventually(5*time.Second, "heir's agent finishes", func() error {
		got := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key("remote"), got); err != nil {
			return err
		}
		got.Finalizers = slices.DeleteFunc(got.Finalizers, func(f string) bool { return f == sandlotv1.FinalizerData })
		return h.c.Update(context.Background(), got)
	})
	h.gone(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "remote"}})
}

// addDataFinalizer plays the node agent taking charge of a snapshot's data.
func (h *harness) addDataFinalizer(s *sandlotv1.Snapshot) {
	h.t.Helper()
	h.eventually(5*time.Second, "data finalizer on "+s.Name, func() error {
		if err := h.c.Get(context.Background(), h.key(s.Name), s); err != nil {
			return err
		}
		s.Finalizers = append(s.Finalizers, sandlotv1.FinalizerData)
		return h.c.Update(context.Background(), s)
	})
}
