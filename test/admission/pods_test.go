package admission

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// The pods below are what controllers/ writes (buildPod, poolPod,
// claimPoolPod), keys encoded by the same codec.

const poolTemplate = "python"

func restoreRef() *sandlotv1.RestoreRef {
	return &sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: "python-base-n1",
		UID: "0b1e4c8a-6d2f-4a73-9e15-c4d8f0a2b6e7", Location: "/var/lib/sandlot/store/snapshots/python-base-n1"}
}

// rules are a sandbox's spec.network, as its pods carry them.
func rules() *sandlotv1.SandboxNetwork {
	return &sandlotv1.SandboxNetwork{AllowOut: []string{"example.com"}, DenyOut: []string{"0.0.0.0/0"}}
}

// sandboxPod is a Sandbox's pod restoring a Snapshot of its namespace,
// with network rules.
func sandboxPod(t *testing.T) *corev1.Pod {
	t.Helper()
	ann, err := sandlotv1.VMAnnotations{SandboxID: "sbx00000000000000001", Restore: restoreRef(), VCPU: 1, MemoryMiB: 512,
		Network: rules()}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf(map[string]string{sandlotv1.LabelSandbox: "sbx", sandlotv1.LabelSandboxID: "sbx00000000000000001",
		sandlotv1.LabelNode: "n1"}, ann, true)
	pod.Spec.NodeName = "n1"
	return pod
}

// poolPod is an unclaimed warm pool pod of template python.
func poolPod(t *testing.T) *corev1.Pod {
	t.Helper()
	ann, err := sandlotv1.VMAnnotations{Restore: restoreRef(), Pool: poolTemplate}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf(map[string]string{sandlotv1.LabelPool: poolTemplate, sandlotv1.LabelSandbox: "", sandlotv1.LabelNode: "n1",
		sandlotv1.LabelBaseRevision: "rev1"}, ann, true)
	pod.Spec.NodeName = "n1"
	return pod
}

// claim gives pool pod to sandbox "claimer" as claimPoolPod does: the
// claim and network annotations, the sandbox labels and the owner in one
// patch guarded by the pod's resourceVersion.
func claim(c client.Client, pod *corev1.Pod) error {
	cur := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), cur); err != nil {
		return err
	}
	orig := cur.DeepCopy()
	a, err := sandlotv1.DecodeVMAnnotations(cur.Annotations)
	if err != nil {
		return err
	}
	a.Claim = &sandlotv1.PoolClaim{Sandbox: "claimer", SandboxID: "claimer0000000000001", Env: map[string]string{"A": "b"}}
	a.Network = rules()
	enc, err := a.Encode()
	if err != nil {
		return err
	}
	cur.Annotations = maps.Clone(cur.Annotations)
	maps.Copy(cur.Annotations, enc)
	cur.Labels = maps.Clone(cur.Labels)
	cur.Labels[sandlotv1.LabelSandbox], cur.Labels[sandlotv1.LabelSandboxID] = "claimer", "claimer0000000000001"
	cur.OwnerReferences = []metav1.OwnerReference{{APIVersion: sandlotv1.GroupVersion.String(), Kind: "Sandbox",
		Name: "claimer", UID: "6a3c1f0e-2b4d-4e8a-9c7f-1d5e3b9a0c24", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	return c.Patch(context.Background(), cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}
