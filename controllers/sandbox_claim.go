package controllers

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// claimPoolPod gives a template's sandbox one of the template's warm pool
// pods — restored and paused already, so no pod starts — or nil when none
// is ready. The claim is a patch guarded by the pod's resourceVersion: of
// two sandboxes claiming one pod, one wins and the other tries the next.
// A pod this sandbox claimed before (its status write lost) is found
// first.
func (r *SandboxReconciler) claimPoolPod(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource) (*corev1.Pod, error) {
	tpl := sbx.Spec.Source.Template
	mine := &corev1.PodList{}
	if err := r.List(ctx, mine, client.InNamespace(sbx.Namespace), client.MatchingLabels{sandlotv1.LabelPool: tpl, sandlotv1.LabelSandbox: sbx.Name}); err != nil {
		return nil, fmt.Errorf("list claimed pool pods: %w", err)
	}
	for i := range mine.Items {
		if metav1.IsControlledBy(&mine.Items[i], sbx) {
			return &mine.Items[i], nil
		}
	}
	free := &corev1.PodList{}
	if err := r.List(ctx, free, client.InNamespace(sbx.Namespace), client.MatchingLabels{sandlotv1.LabelPool: tpl, sandlotv1.LabelSandbox: "",
		sandlotv1.LabelBaseRevision: src.BaseRevision}); err != nil {
		return nil, fmt.Errorf("list pool pods: %w", err)
	}
	claim := &sandlotv1.PoolClaim{Sandbox: sbx.Name, SandboxID: sbx.Status.SandboxID, Env: envMap(src.Env)}
	for i := range free.Items {
		pod := &free.Items[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		orig := pod.DeepCopy()
		ann, err := claimAnnotations(pod, claim, sbx.Spec.Network)
		if err != nil {
			return nil, fmt.Errorf("claim pool pod %s: %w", pod.Name, err)
		}
		pod.Annotations = ann
		pod.Labels[sandlotv1.LabelSandbox] = sbx.Name
		pod.Labels[sandlotv1.LabelSandboxID] = sbx.Status.SandboxID
		pod.OwnerReferences = []metav1.OwnerReference{ownerRef(sbx)}
		err = r.Patch(ctx, pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			return pod, nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			continue // another sandbox took it, or the pool let it go
		default:
			return nil, fmt.Errorf("claim pool pod %s: %w", pod.Name, err)
		}
	}
	return nil, nil
}

// claimAnnotations are a pool pod's annotations with the claim and the
// sandbox's network rules added, through the codec the shim and the agent
// decode them with.
func claimAnnotations(pod *corev1.Pod, claim *sandlotv1.PoolClaim, network *sandlotv1.SandboxNetwork) (map[string]string, error) {
	a, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
	if err != nil {
		return nil, err
	}
	a.Claim, a.Network = claim, network
	enc, err := a.Encode()
	if err != nil {
		return nil, err
	}
	out := maps.Clone(pod.Annotations)
	maps.Copy(out, enc)
	return out, nil
}

// adoptPoolPod records a claimed pool pod as the sandbox's pod.
func adoptPoolPod(sbx *sandlotv1.Sandbox, pod *corev1.Pod, src resolvedSource) {
	st := &sbx.Status
	res := src.VM.Resources
	st.Resources = &res
	st.NodeName, st.PodName, st.PodIP = pod.Spec.NodeName, pod.Name, ""
	st.BaseSnapshot = pod.Annotations[sandlotv1.AnnotationRestoreName]
	st.Phase = sandlotv1.SandboxStarting
	st.Reason, st.Message = "", ""
	msg := "claimed warm pool pod " + pod.Name + " on " + pod.Spec.NodeName
	setCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionScheduled, metav1.ConditionTrue, sandlotv1.ReasonClaimedFromPool, msg)
	setCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionReady, metav1.ConditionFalse, sandlotv1.ReasonPodPending, msg)
}

func envMap(env []sandlotv1.EnvVar) map[string]string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return m
}
