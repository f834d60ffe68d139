package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestNewGuestRebuildsBase: a node whose agent publishes a new guest (an
// upgrade brought a new kernel, initramfs or guest agent) gets a base of
// that guest built in the background, said in status (GuestChanged);
// the old base serves new sandboxes until the new one is Ready, then
// goes, and sandboxes restore the new guest's base.
func TestNewGuestRebuildsBase(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("guest-node", "8", "16Gi", nil)
	h.setGuest("guest-node", "00000000000000aa")
	h.acceptedTemplate("upgrading", 512)
	old := h.buildGuest("upgrading", "guest-node", "00000000000000aa")

	h.setGuest("guest-node", "00000000000000bb")
	h.eventually(20*time.Second, "a base of the new guest building beside the old one", func() error {
		entries := h.nodeEntries("upgrading", "guest-node")
		if len(entries) != 2 || entries["00000000000000aa"].Phase != sandlotv1.BaseReady ||
			entries["00000000000000bb"].Reason != sandlotv1.ReasonGuestChanged {
			return fmt.Errorf("entries %+v", entries)
		}
		return nil
	})
	during := h.create2(newSandbox("during", sandlotv1.SandboxSource{Template: "upgrading"}))
	if during.Status.BaseSnapshot != old.Snapshot {
		t.Fatalf("a sandbox created during the rebuild restores %q, want the old guest's base %s", during.Status.BaseSnapshot, old.Snapshot)
	}

	fresh := h.buildGuest("upgrading", "guest-node", "00000000000000bb")
	after := h.create2(newSandbox("after", sandlotv1.SandboxSource{Template: "upgrading"}))
	if after.Status.BaseSnapshot != fresh.Snapshot || fresh.Snapshot == old.Snapshot {
		t.Fatalf("a sandbox after the rebuild restores %q, want the new guest's base %s (old %s)", after.Status.BaseSnapshot, fresh.Snapshot, old.Snapshot)
	}
	snap := &sandlotv1.Snapshot{}
	err := h.c.Get(context.Background(), h.key(old.Snapshot), snap)
	if client.IgnoreNotFound(err) != nil || (err == nil && snap.DeletionTimestamp == nil) {
		t.Fatalf("the old guest's base %s: %v, deletion %v: want it going", old.Snapshot, err, snap.DeletionTimestamp)
	}
}

// buildGuest builds tpl's bases until node's only entry is a Ready base
// of guest (the controller may have seen the node before its guest).
func (h *harness) buildGuest(tpl, node, guest string) sandlotv1.BaseSnapshot {
	h.t.Helper()
	var got sandlotv1.BaseSnapshot
	h.eventually(40*time.Second, "the only base of "+tpl+" on "+node+": guest "+guest+", Ready", func() error {
		if err := h.playBuilders(tpl); err != nil {
			return err
		}
		entries := h.nodeEntries(tpl, node)
		got = entries[guest]
		if len(entries) != 1 || got.Phase != sandlotv1.BaseReady {
			return fmt.Errorf("entries %+v", entries)
		}
		return nil
	})
	return got
}

// create2 creates a sandbox and waits until it starts.
func (h *harness) create2(sbx *sandlotv1.Sandbox) *sandlotv1.Sandbox {
	h.t.Helper()
	h.create(sbx)
	return h.waitPhase(sbx.Name, sandlotv1.SandboxStarting)
}

// setGuest plays the node's agent publishing its guest (AnnotationGuest).
func (h *harness) setGuest(node, guest string) {
	h.t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{sandlotv1.AnnotationGuest: guest}}})
	n := &corev1.Node{}
	n.Name = node
	if err := h.c.Patch(context.Background(), n, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		h.t.Fatalf("annotate node %s: %v", node, err)
	}
}

// nodeEntries are a template's current-revision base entries on node, by guest.
func (h *harness) nodeEntries(tplName, node string) map[string]sandlotv1.BaseSnapshot {
	h.t.Helper()
	tpl := &sandlotv1.Template{}
	if err := h.c.Get(context.Background(), h.key(tplName), tpl); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]sandlotv1.BaseSnapshot{}
	for _, e := range tpl.Status.BaseSnapshots {
		if e.Node == node && e.Revision == tpl.Status.BaseRevision {
			out[e.Guest] = e
		}
	}
	return out
}
