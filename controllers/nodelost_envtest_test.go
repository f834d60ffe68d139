package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestNodeLostRestoresElsewhere: a sandbox with spec.onNodeLost Restore
// whose node stops answering waits (the node may still run its VM), then,
// once the node is tainted out-of-service, starts on the other node from
// its newest snapshot in the shared store, same sandbox ID.
func TestNodeLostRestoresElsewhere(t *testing.T) {
	h := newHarness(t)
	startController(t)
	h.addNode("lost-a", "8", "16Gi", nil)
	h.template("python", 512)
	sbx := newSandbox("phoenix", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.OnNodeLost = sandlotv1.NodeLostRestore
	before := h.running(sbx, "10.88.11.1")
	h.addNode("lost-b", "8", "16Gi", nil)
	h.snapshotOf("phoenix-remote", before, sandlotv1.RemoteReady)
	h.snapshotOf("phoenix-local", before, sandlotv1.RemotePending) // another node could not restore it

	h.setNodeReady("lost-a", false)
	if err := h.c.Delete(context.Background(), h.pod(before.Status.PodName)); err != nil { // the taint manager's eviction
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "phoenix waits for lost-a to be fenced", func() error {
		s := h.sandbox("phoenix")
		if c := condition(s.Status.Conditions, sandlotv1.ConditionReady); c.Reason != sandlotv1.ReasonNodeLost ||
			!strings.Contains(c.Message, corev1.TaintNodeOutOfService) {
			return errorf("Ready %s: %s", c.Reason, c.Message)
		}
		return nil
	})
	h.consistently(time.Second, "nothing restored while lost-a may run the VM", func() error {
		if s := h.sandbox("phoenix"); s.Status.Phase != sandlotv1.SandboxRunning || s.Status.RestoringFrom != "" {
			return errorf("phase %s, restoring from %q", s.Status.Phase, s.Status.RestoringFrom)
		}
		return nil
	})

	h.taint("lost-a", corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	restoring := h.waitPhase("phoenix", sandlotv1.SandboxStarting)
	if restoring.Status.NodeName != "lost-b" || restoring.Status.RestoringFrom != "phoenix-remote" {
		t.Fatalf("starting on %q from %q, want lost-b from phoenix-remote", restoring.Status.NodeName, restoring.Status.RestoringFrom)
	}
	if src := sandlotv1.PodSource(h.pod(restoring.Status.PodName).Annotations); src == nil || src.Name != "phoenix-remote" {
		t.Fatalf("the new pod restores %+v, want snapshot phoenix-remote", src)
	}
	h.setPod(restoring.Status.PodName, corev1.PodRunning, "10.88.11.2")
	after := h.waitPhase("phoenix", sandlotv1.SandboxRunning)
	if after.Status.SandboxID != before.Status.SandboxID || after.Status.RestoringFrom != "" {
		t.Fatalf("runs as %s restoring from %q, was %s", after.Status.SandboxID, after.Status.RestoringFrom, before.Status.SandboxID)
	}
}

// TestNodeLostReported: by default a sandbox whose node is deleted under
// it fails with NodeLost, saying which node.
func TestNodeLostReported(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("gone-a", "8", "16Gi", nil)
	h.template("python", 512)
	s := h.running(newSandbox("mortal", sandlotv1.SandboxSource{Template: "python"}), "10.88.11.3")
	h.snapshotOf("mortal-snap", s, sandlotv1.RemoteReady) // Report never restores, even with a snapshot
	if err := h.c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone-a"}}); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(context.Background(), h.pod(s.Status.PodName)); err != nil { // pod GC's orphan delete
		t.Fatal(err)
	}
	failed := h.waitPhase("mortal", sandlotv1.SandboxFailed)
	if failed.Status.Reason != sandlotv1.ReasonNodeLost || !strings.Contains(failed.Status.Message, "node gone-a is deleted") {
		t.Fatalf("failed with %s: %s", failed.Status.Reason, failed.Status.Message)
	}
}

// snapshotOf makes a Ready Snapshot of sandbox s, its data in the
// shared store as remote says (as the node agent reports one).
func (h *harness) snapshotOf(name string, s *sandlotv1.Sandbox, remote sandlotv1.RemoteStatus) {
	h.t.Helper()
	h.create(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: s.Name}}})
	h.setSnapshot(name, func(st *sandlotv1.SnapshotStatus) {
		st.Phase, st.Location, st.RemoteStatus = sandlotv1.DataReady, "store://"+name, remote
		st.NodeName, st.SandboxID, st.Template = s.Status.NodeName, s.Status.SandboxID, "python"
		st.VM = sandlotv1.VMSpec{Image: "docker.io/library/python:3.12", Resources: *s.Status.Resources, WritableLayerMiB: 1024}
	})
}
