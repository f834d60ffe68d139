package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent"
)

// waitVMReady waits for the Sandbox's VMReady and returns the Sandbox.
func (a *agent) waitVMReady(name string, status metav1.ConditionStatus, reason string) *sandlotv1.Sandbox {
	a.t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}}
	a.eventually("VMReady "+string(status)+" "+reason+" on "+name, func() error {
		if err := a.get(sbx); err != nil {
			return err
		}
		return hasCondition(sbx.Status.Conditions, sandlotv1.ConditionVMReady, status, reason)
	})
	return sbx
}

// appliedBy says whether manager server-side-applied field (a fieldsV1
// key such as `"k:{\"type\":\"VMReady\"}"`) of obj's status.
func appliedBy(obj metav1.Object, manager, field string) error {
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "status" &&
			mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), field) {
			return nil
		}
	}
	return fmt.Errorf("no status apply of %s by %s in the managed fields", field, manager)
}

// TestVMReadyFollowsTheVM: VMReady tells a pod that does not run yet, a
// VM that is paused and one that runs, each with the agent's field
// manager and an Event on the Sandbox.
func TestVMReadyFollowsTheVM(t *testing.T) {
	a := startAgent(t, nil)
	a.sandbox("probed", "probedsandbox0000001")
	_, vm := a.pod("probed", map[string]string{sandlotv1.LabelSandbox: "probed"}, nil, "", "Paused")
	sbx := a.waitVMReady("probed", metav1.ConditionFalse, "PodNotRunning")
	a.waitEvent(sbx, corev1.EventTypeNormal, "PodNotRunning", "VMReady=False")

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probed"}}
	a.setStatus(pod, func() { pod.Status.Phase = corev1.PodRunning })
	a.waitVMReady("probed", metav1.ConditionFalse, "VMPaused")

	vm.set(func(v *fakeVM) { v.state, v.guestAgent = "Running", "0.2.0" })
	sbx = a.waitVMReady("probed", metav1.ConditionTrue, "VMRunning")
	if err := appliedBy(sbx, nodeagent.FieldManager, `"k:{\"type\":\"VMReady\"}"`); err != nil {
		t.Fatal(err)
	}
	if err := appliedBy(sbx, nodeagent.FieldManager, `"f:guestVersion"`); err != nil || sbx.Status.GuestVersion != "0.2.0" {
		t.Fatalf("guestVersion %q (%v): want the guest agent's 0.2.0, applied by the agent", sbx.Status.GuestVersion, err)
	}
	if c := condition(sbx.Status.Conditions, sandlotv1.ConditionVMReady); c.ObservedGeneration != sbx.Generation ||
		!strings.Contains(c.Message, a.node) {
		t.Fatalf("VMReady = %+v, want observedGeneration %d and the node in the message", c, sbx.Generation)
	}
	a.waitEvent(sbx, corev1.EventTypeNormal, "VMPaused", "VMReady=False")
	a.waitEvent(sbx, corev1.EventTypeNormal, "VMRunning", "VMReady=True")
}

// claimedPool makes a warm pool pod on the agent's node, paused, that the
// controller claimed for a new Sandbox with token sealed in the claim;
// its VM refuses the identity with identityErr (nil: takes it).
func (a *agent) claimedPool(sandbox, id, token string, identityErr error) (*sandlotv1.Sandbox, *corev1.Pod, *fakeVM) {
	a.t.Helper()
	sbx := a.sandbox(sandbox, id)
	// The token and env are sealed to the node (the agent reads no Secret).
	podName := "python-pool-" + id[:5]
	sealedID := a.seal(podName, sandbox, sealed.Identity{Token: token, Env: map[string]string{"FROM_SANDBOX": "yes"}})
	ann, err := sandlotv1.VMAnnotations{Pool: "python",
		Claim: &sandlotv1.PoolClaim{Sandbox: sandbox, SandboxID: id, Sealed: sealedID}}.Encode()
	if err != nil {
		a.t.Fatalf("claim annotations: %v", err)
	}
	labels := map[string]string{sandlotv1.LabelPool: "python", sandlotv1.LabelSandbox: sandbox}
	pod, vm := a.pod(podName, labels, ann, "", "Paused")
	vm.set(func(v *fakeVM) { v.identityErr = identityErr })
	a.setStatus(sbx, func() { sbx.Status.PodName = pod.Name })        // as the claim's status write names it
	a.setStatus(pod, func() { pod.Status.Phase = corev1.PodRunning }) // the claim is carried out once it runs
	return sbx, pod, vm
}

// waitClaimDone waits until the pool pod's claim is recorded as carried
// out: the agent writes it after VMReady (which the create waits for).
func (a *agent) waitClaimDone(pod *corev1.Pod) {
	a.t.Helper()
	a.eventually("the claim recorded as done on "+pod.Name, func() error {
		if err := a.get(pod); err != nil {
			return err
		}
		if got, claim := pod.Annotations[sandlotv1.AnnotationClaimActivated], pod.Annotations[sandlotv1.AnnotationClaim]; got != claim {
			return fmt.Errorf("claim-activated = %q, want the claim %q", got, claim)
		}
		return nil
	})
}

// TestClaimActivatesWarmPoolVM: a claimed pool pod's VM is resumed with
// the sandbox's identity (its token from the Secret), the claim is
// recorded on the pod, VMReady turns True and Events tell it.
func TestClaimActivatesWarmPoolVM(t *testing.T) {
	a := startAgent(t, nil)
	const id, token = "claimedsandbox000001", "s3cr3t-token"
	_, pod, vm := a.claimedPool("claimed", id, token, nil)
	sbx := a.waitVMReady("claimed", metav1.ConditionTrue, "VMRunning")

	resumes, ids, _, _ := vm.calls()
	if resumes != 1 || len(ids) != 1 {
		t.Fatalf("%d Resume and %d SetIdentity calls, want one of each", resumes, len(ids))
	}
	want := map[string]string{"FROM_SANDBOX": "yes", sandlotv1.EnvSandboxID: id, sandlotv1.EnvAccessToken: token}
	if got := ids[0]; got.GetSandboxId() != id || got.GetAccessToken() != token || got.GetHostname() != id ||
		!maps.Equal(got.GetEnv(), want) {
		t.Fatalf("SetIdentity(%v), want sandbox %s, token %s, hostname %s, env %v", got, id, token, id, want)
	}
	a.waitClaimDone(pod)
	a.waitEvent(sbx, corev1.EventTypeNormal, nodeagent.ReasonClaimActivated, pod.Name)
	a.waitEvent(sbx, corev1.EventTypeNormal, "VMRunning", "VMReady=True")
	// Once: the VMReady write wakes the pod again before the agent's cache
	// shows the claim's record, and the VM runs as its sandbox by then.
	// And still once a while later (a late reconcile must not redo it).
	poll.Consistently(t, 3*time.Second, "one Resume and one SetIdentity once the claim was recorded", func() error {
		if resumes, ids, _, _ := vm.calls(); resumes != 1 || len(ids) != 1 {
			return fmt.Errorf("%d Resume and %d SetIdentity calls", resumes, len(ids))
		}
		return nil
	})
}

// TestClaimFailureIsClaimFailed: a claim whose identity the VM refuses is
// VMReady=False ClaimFailed with a Warning Event, is not recorded as
// activated, and is carried out once the VM takes it.
func TestClaimFailureIsClaimFailed(t *testing.T) {
	a := startAgent(t, nil)
	_, pod, vm := a.claimedPool("refused", "refusedsandbox000001", "token", errors.New("guest control channel closed"))
	sbx := a.waitVMReady("refused", metav1.ConditionFalse, sandlotv1.ReasonClaimFailed)
	if c := condition(sbx.Status.Conditions, sandlotv1.ConditionVMReady); !strings.Contains(c.Message, "guest control channel closed") {
		t.Fatalf("VMReady message %q does not say why", c.Message)
	}
	a.waitEvent(sbx, corev1.EventTypeWarning, sandlotv1.ReasonClaimFailed, "guest control channel closed")
	if err := a.get(pod); err != nil {
		t.Fatal(err)
	}
	if got := pod.Annotations[sandlotv1.AnnotationClaimActivated]; got != "" {
		t.Fatalf("a failed claim is recorded as activated: %q", got)
	}
	a.noEvent(sbx, nodeagent.ReasonClaimActivated)

	// The agent tries again (VMReady False is probed every 2s).
	vm.set(func(v *fakeVM) { v.identityErr = nil })
	a.waitVMReady("refused", metav1.ConditionTrue, "VMRunning")
	a.waitEvent(sbx, corev1.EventTypeNormal, nodeagent.ReasonClaimActivated, pod.Name)
}

// TestVMReadyFollowsTheGeneration: a new generation of a Sandbox whose VM
// runs on (a pause undone before its package was taken) gets VMReady
// confirmed for it, though no pod event follows.
func TestVMReadyFollowsTheGeneration(t *testing.T) {
	a := startAgent(t, nil)
	a.sandbox("regen", "regensandbox00000001")
	a.pod("regen", map[string]string{sandlotv1.LabelSandbox: "regen"}, nil, corev1.PodRunning, "Running")
	sbx := a.waitVMReady("regen", metav1.ConditionTrue, "VMRunning")
	for _, paused := range []string{"true", "false"} { // merge patches, as kubectl sends
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":`+paused+`}}`))
		if err := a.c.Patch(context.Background(), sbx, patch); err != nil {
			t.Fatal(err)
		}
	}
	a.eventually("VMReady at the new generation", func() error {
		if err := a.get(sbx); err != nil {
			return err
		}
		if c := condition(sbx.Status.Conditions, sandlotv1.ConditionVMReady); c.Status != metav1.ConditionTrue || c.ObservedGeneration != sbx.Generation {
			return fmt.Errorf("VMReady %+v at generation %d", c, sbx.Generation)
		}
		return nil
	})
}
