package shim

import (
	"context"
	"testing"

	"github.com/containerd/containerd/api/types/task"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestStartSlot: a start slot's pod runs with no VM (its app container
// running nothing, its guest's gate shut) until a claim's Restore puts
// the claimant's VM in it, which opens the gate and which the app then
// follows (and its snapshots name); the rules arrive before the VM.
func TestStartSlot(t *testing.T) {
	h := newHarness(t)
	h.mustCreate(testPod, pauseSpec())
	spec := appSpec()
	spec.Annotations[sandlotv1.AnnotationPool] = "python"
	spec.Annotations[sandlotv1.AnnotationBoot] = sandlotv1.BootSlot
	h.mustCreate(testApp, spec)
	h.start(testPod, "")
	h.start(testApp, "")
	if h.vms.last() != nil {
		t.Fatal("a start slot started a VM")
	}
	if st := h.state(testApp, ""); st.Status != task.Status_RUNNING {
		t.Fatalf("slot app %v, want running (nothing)", st.Status)
	}
	c, _ := h.s.get(testApp)
	api := &controlAPI{s: h.s, pod: c.pod}
	ctx := context.Background()
	if st, err := api.Stats(ctx, &controlapi.StatsRequest{}); err != nil || st.GetState() != controlapi.StateEmpty {
		t.Fatalf("stats of an empty slot: %v, %v", st, err)
	}
	if _, err := api.SetNetwork(ctx, &controlapi.SetNetworkRequest{NetworkJson: `{"allowOut":["10.1.0.0/16"]}`}); err != nil {
		t.Fatalf("rules before the claim's VM: %v", err)
	}
	if h.net.gateOpen {
		t.Fatal("the gate is open before any VM has the pod's identity")
	}
	dir := h.snapshotDir(map[string]string{labelImageDigest: testDigest, labelInitPID: "77"})
	req := &controlapi.RestoreRequest{Dir: dir, RequestId: "claim-1", Identity: &controlapi.SetIdentityRequest{
		SandboxId: "abcdefghij0123456789", AccessToken: "tok"}}
	if _, err := api.Restore(ctx, req); err != nil {
		t.Fatal(err)
	}
	m := h.vms.last()
	if m == nil || m.restoredFrom != dir || m.identity.SandboxID != "abcdefghij0123456789" || !h.net.gateOpen || m.announced != 1 {
		t.Fatalf("after the claim: VM %+v, gate open %v", m, h.net.gateOpen)
	}
	if st := h.state(testApp, ""); st.Status != task.Status_RUNNING || h.guestPID(testApp, "") != 77 {
		t.Fatalf("app %v pid %d after the claim, want following 77", st.Status, h.guestPID(testApp, ""))
	}
	if got := m.label(labelInitPID); got != "77" {
		t.Fatalf("the restored VM's snapshots would name init PID %q, want 77: their clones would have no app to follow", got)
	}
	if st, err := api.Stats(ctx, &controlapi.StatsRequest{}); err != nil || st.GetState() != "Running" {
		t.Fatalf("stats after the claim: %v, %v", st, err)
	}
}
