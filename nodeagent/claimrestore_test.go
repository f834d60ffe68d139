package nodeagent_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// restoreClaimPod makes a paused warm pool pod on the agent's node that
// the controller gave to sbx (its controller owner) with a claim that
// restores ref, sbx's token sealed in it.
func (a *agent) restoreClaimPod(sbx *sandlotv1.Sandbox, id string, ref sandlotv1.RestoreRef) (*corev1.Pod, *fakeVM) {
	base := &sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: "python-base", UID: "base-uid", Location: "snapshots/base-uid"}
	return a.claimedPod(sbx, "pool", sandlotv1.VMAnnotations{Pool: "python", Restore: base,
		Claim: &sandlotv1.PoolClaim{Sandbox: sbx.Name, SandboxID: id, Restore: &ref}}, "Paused")
}

// claimedPod makes a pool pod of template python on the agent's node,
// claimed by sbx with annotations ann, its shim's VM in vmState, and
// sbx's token sealed in the claim.
func (a *agent) claimedPod(sbx *sandlotv1.Sandbox, kind string, ann sandlotv1.VMAnnotations, vmState string) (*corev1.Pod, *fakeVM) {
	a.t.Helper()
	name := "python-" + kind + "-" + ann.Claim.SandboxID[:5]
	ann.Claim.Sealed = a.seal(name, sbx.Name, sealed.Identity{Token: "token-" + sbx.Name})
	enc, err := ann.Encode()
	if err != nil {
		a.t.Fatalf("claim annotations: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: enc,
		Labels:          map[string]string{sandlotv1.LabelPool: "python", sandlotv1.LabelSandbox: sbx.Name},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sbx, sandlotv1.GroupVersion.WithKind("Sandbox"))}},
		Spec: corev1.PodSpec{NodeName: a.node, Containers: []corev1.Container{{Name: sandlotv1.ContainerName, Image: "sandbox"}}}}
	a.create(pod)
	vm := a.shims.vm(pod.UID, vmState)
	// As the claim's status write names the pod and its node: the
	// agent's cache holds the sandbox from then on.
	a.setStatus(sbx, func() { sbx.Status.NodeName, sbx.Status.PodName = a.node, pod.Name })
	a.setStatus(pod, func() { pod.Status.Phase = corev1.PodRunning })
	return pod, vm
}

// TestSlotClaim: a template's sandbox that claimed a start slot (a pod
// with no VM) gets the template's base restored into it with its
// identity; a claim of a slot that restores nothing is refused by name.
func TestSlotClaim(t *testing.T) {
	a := startAgent(t, nil)
	snap, ref := a.readySnapshot("python-base")
	a.template("python", snap.Name)
	const id = "slotclaim00000000001"
	sbx := a.sandbox("of-slot", id) // its source is template python
	pod, vm := a.claimedPod(sbx, "slot", sandlotv1.VMAnnotations{Pool: "python", Slot: true,
		Claim: &sandlotv1.PoolClaim{Sandbox: sbx.Name, SandboxID: id, Restore: &ref}}, "Empty")
	a.waitVMReady("of-slot", metav1.ConditionTrue, "VMRunning")
	resumes, ids, _, restores := vm.calls()
	if resumes != 0 || len(restores) != 1 || !strings.Contains(restores[0], string(snap.UID)) {
		t.Fatalf("%d Resume calls and restores %v, want the base %s restored into the slot", resumes, restores, snap.UID)
	}
	if len(ids) != 1 || ids[0].GetSandboxId() != id || ids[0].GetAccessToken() != "token-of-slot" {
		t.Fatalf("identities pushed %v, want the sandbox's with the restore", ids)
	}
	a.waitClaimDone(pod)
	// And still once a while later (a late reconcile must not redo it).
	poll.Consistently(t, 3*time.Second, "the claim carried out once", func() error {
		if _, ids, _, restores := vm.calls(); len(restores) != 1 || len(ids) != 1 {
			return fmt.Errorf("restores %v and identities %v once the claim was recorded", restores, ids)
		}
		return nil
	})

	const bare = "bareslot000000000002"
	plain := a.sandbox("of-slot-bare", bare)
	_, empty := a.claimedPod(plain, "slot", sandlotv1.VMAnnotations{Pool: "python", Slot: true,
		Claim: &sandlotv1.PoolClaim{Sandbox: plain.Name, SandboxID: bare}}, "Empty")
	st := a.waitVMReady("of-slot-bare", metav1.ConditionFalse, sandlotv1.ReasonClaimFailed)
	if c := condition(st.Status.Conditions, sandlotv1.ConditionVMReady); !strings.Contains(c.Message, "start slot") {
		t.Fatalf("VMReady message %q does not say a slot's claim must restore", c.Message)
	}
	if _, ids, _, restores := empty.calls(); len(restores) != 0 || len(ids) != 0 {
		t.Fatalf("a claim without data restored %v and pushed %v", restores, ids)
	}
}

// TestRestoreClaim: a sandbox from a Snapshot that claimed a warm pool
// pod gets the snapshot restored into it in place, with its identity in
// the same call; a claim naming a Snapshot its sandbox does not restore
// (another sandbox's) restores nothing and says why.
func TestRestoreClaim(t *testing.T) {
	a := startAgent(t, nil)
	snap, ref := a.readySnapshot("claimed-src")

	child := a.clone(a.ns, "claim-child", snap.Name)
	const id = "childclaim0000000001"
	pod, vm := a.restoreClaimPod(child, id, ref)
	a.waitVMReady("claim-child", metav1.ConditionTrue, "VMRunning")
	resumes, ids, _, restores := vm.calls()
	if resumes != 0 || len(restores) != 1 || !strings.Contains(restores[0], string(snap.UID)) {
		t.Fatalf("%d Resume calls and restores %v, want the snapshot %s restored in place", resumes, restores, snap.UID)
	}
	if len(ids) != 1 || ids[0].GetSandboxId() != id || ids[0].GetAccessToken() != "token-claim-child" || ids[0].GetHostname() != id {
		t.Fatalf("identities pushed %v, want the sandbox's with the restore", ids)
	}
	a.waitClaimDone(pod)

	// A tampered claim: a template's sandbox naming that Snapshot.
	thief := a.sandbox("claim-thief", "thiefclaim0000000001")
	_, stolen := a.restoreClaimPod(thief, "thiefclaim0000000001", ref)
	sbx := a.waitVMReady("claim-thief", metav1.ConditionFalse, sandlotv1.ReasonClaimFailed)
	if c := condition(sbx.Status.Conditions, sandlotv1.ConditionVMReady); !strings.Contains(c.Message, "may not restore") {
		t.Fatalf("VMReady message %q does not say the claim was refused", c.Message)
	}
	if _, ids, _, restores := stolen.calls(); len(restores) != 0 || len(ids) != 0 {
		t.Fatalf("a refused claim restored %v and pushed %v", restores, ids)
	}
}
