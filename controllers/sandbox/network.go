package sandbox

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// A sandbox's network rules reach its VM through its pod: every pod the
// controller makes (or claims from a warm pool) carries spec.network in
// AnnotationNetwork, an edit of spec.network is a merge patch of that one
// annotation on the live pod, and the node agent applies each value and
// records it in AnnotationNetworkApplied. The status shows what that
// annotation says is enforced.

// specNetworkError is ParseNetwork's refusal of spec.network (the CRD's
// CEL refuses most of it first; this is the check the shim relies on).
func specNetworkError(n *sandlotv1.SandboxNetwork) error {
	if _, err := sandlotv1.ParseNetwork(n); err != nil {
		return fmt.Errorf("spec.network is refused: %w", err)
	}
	return nil
}

// podLive: a pod whose VM runs or will (not terminated, not going).
func podLive(pod *corev1.Pod) bool {
	return pod != nil && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
}

// syncPodNetwork patches the live pod's AnnotationNetwork to spec.network
// when they differ: one merge patch of that annotation (guarded by the
// pod's UID), which the node agent sees and applies with no restart. A
// refused spec.network is never written; the pod keeps its rules. pod is
// updated from the answer.
func (r *Reconciler) syncPodNetwork(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod) error {
	if !podLive(pod) || specNetworkError(sbx.Spec.Network) != nil {
		return nil
	}
	want, err := sandlotv1.EncodeNetwork(sbx.Spec.Network)
	if err != nil {
		return fmt.Errorf("encode spec.network of sandbox %s: %w", sbx.Name, err)
	}
	if pod.Annotations[sandlotv1.AnnotationNetwork] == want {
		return nil
	}
	var value any = want
	if want == "" {
		value = nil // no rules: the annotation goes
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID,
		"annotations": map[string]any{sandlotv1.AnnotationNetwork: value}}})
	if err != nil {
		return fmt.Errorf("network patch of pod %s: %w", pod.Name, err)
	}
	if err := r.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // gone: the next reconcile sees it
		}
		return fmt.Errorf("patch network rules of pod %s: %w", pod.Name, err)
	}
	return nil
}

// networkView is what a Sandbox's status shows of its rules.
type networkView struct {
	// Enforced is decoded from the pod's AnnotationNetworkApplied (nil
	// when absent or when no VM runs).
	Enforced *sandlotv1.SandboxNetwork
	Status   metav1.ConditionStatus
	Reason   string
	Message  string
}

// viewNetwork maps spec.network (specErr: its refusal) and the sandbox's
// live pod (nil: none) onto the status. Applied means the agent's
// AnnotationNetworkApplied equals spec.network's encoding (absent and
// empty alike: no rules).
func viewNetwork(spec *sandlotv1.SandboxNetwork, specErr error, pod *corev1.Pod) networkView {
	v := networkView{Status: metav1.ConditionFalse, Reason: sandlotv1.ReasonNetworkPending}
	var applied string
	if pod != nil {
		applied = pod.Annotations[sandlotv1.AnnotationNetworkApplied]
		enforced, _, err := sandlotv1.DecodeNetwork(applied)
		if err != nil {
			v.Message = fmt.Sprintf("pod %s: the node agent's annotation %s is unreadable: %v", pod.Name,
				sandlotv1.AnnotationNetworkApplied, err)
			return v
		}
		v.Enforced = enforced
	}
	if specErr != nil {
		v.Reason, v.Message = sandlotv1.ReasonInvalidNetwork, specErr.Error()
		if pod != nil {
			v.Message += " (pod " + pod.Name + " keeps the rules it has)"
		}
		return v
	}
	want, _ := sandlotv1.EncodeNetwork(spec) // valid: specErr is nil
	switch {
	case pod == nil && spec == nil:
		v.Status, v.Reason, v.Message = metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, "no rules: the node's defaults apply"
	case pod == nil:
		v.Message = "no VM runs: spec.network is applied when the sandbox's pod starts"
	case applied != want:
		v.Message = fmt.Sprintf("waiting for the node agent to apply spec.network to pod %s (annotation %s)",
			pod.Name, sandlotv1.AnnotationNetworkApplied)
	case spec == nil:
		v.Status, v.Reason, v.Message = metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, "no rules: the node's defaults apply"
	default:
		v.Status, v.Reason, v.Message = metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied,
			"the node enforces spec.network on pod "+pod.Name
	}
	return v
}

// applyNetworkView writes the view into the status.
func applyNetworkView(st *sandlotv1.SandboxStatus, gen int64, v networkView) {
	st.Network = v.Enforced
	writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionNetworkApplied, v.Status, v.Reason, v.Message)
}
