package controllers

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// poolRequest is what a sandbox may take from a template's warm pool.
// A plain claim resumes a pod of the template's base revision as it is; a
// restore claim (a sandbox from a Snapshot, a resume from its
// PausedSandbox) has the node agent restore the sandbox's own data into
// the pod in place, so only the restore is on the start's path.
type poolRequest struct {
	template     string
	baseRevision string                // plain claims: the revision the pod restored
	restore      *sandlotv1.RestoreRef // restore claims: the data
}

// poolRequestOf is the claim a sandbox's start may make (false: none).
func poolRequestOf(sbx *sandlotv1.Sandbox, src resolvedSource) (poolRequest, bool) {
	switch {
	case len(src.PerNode) > 0 && sbx.Spec.Source.Template != "":
		return poolRequest{template: sbx.Spec.Source.Template, baseRevision: src.BaseRevision}, true
	case src.Restore.UID != "" && src.Template != "":
		rs := src.Restore
		return poolRequest{template: src.Template, restore: &rs}, true
	}
	return poolRequest{}, false
}

// claimPoolPod gives a sandbox one of its template's warm pool pods —
// started already, so no pod starts — or nil when none fits. The claim is
// a patch guarded by the pod's resourceVersion: of two sandboxes claiming
// one pod, one wins and the other tries the next. A pod this sandbox
// claimed before (its status write lost) is found first.
func (r *SandboxReconciler) claimPoolPod(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource, req poolRequest) (*corev1.Pod, error) {
	mine := &corev1.PodList{}
	if err := r.List(ctx, mine, client.InNamespace(sbx.Namespace), client.MatchingFields{indexPodByClaim: poolKey(req.template, sbx.Name)}); err != nil {
		return nil, fmt.Errorf("list claimed pool pods: %w", err)
	}
	for i := range mine.Items {
		if claimedFor(&mine.Items[i], sbx, req) {
			return &mine.Items[i], nil
		}
	}
	free := &corev1.PodList{}
	if err := r.List(ctx, free, client.InNamespace(sbx.Namespace), client.MatchingFields{indexPodByClaim: poolKey(req.template, "")}); err != nil {
		return nil, fmt.Errorf("list pool pods: %w", err)
	}
	if req.restore == nil {
		// a plain claim resumes the pod's VM as it is: only its revision fits
		free.Items = slices.DeleteFunc(free.Items, func(p corev1.Pod) bool {
			return p.Labels[sandlotv1.LabelBaseRevision] != req.baseRevision
		})
	}
	candidates, err := r.claimable(ctx, sbx, free.Items, src, req)
	if err != nil {
		return nil, err
	}
	claim := &sandlotv1.PoolClaim{Sandbox: sbx.Name, SandboxID: sbx.Status.SandboxID, Env: envMap(src.Env), Restore: req.restore}
	for i := range candidates {
		pod := &candidates[i]
		switch won, err := r.claim(ctx, sbx, pod, claim); {
		case err != nil:
			return nil, err
		case won:
			return pod, nil
		}
	}
	return nil, nil
}

// claimedFor: pod is sbx's claim of req whose status write was lost — not
// a pool pod the sandbox ran in before a pause, which is still going (or
// holds the VM the pause stopped): a resume taking that one for its claim
// ended Failed ("pod ... is being deleted").
func claimedFor(pod *corev1.Pod, sbx *sandlotv1.Sandbox, req poolRequest) bool {
	if !metav1.IsControlledBy(pod, sbx) || pod.DeletionTimestamp != nil {
		return false
	}
	return req.restore == nil || sandlotv1.PodRestoresFrom(pod.Annotations, req.restore.UID)
}

// claim patches pod as sbx's, guarded by its resourceVersion; won is
// false when another sandbox took it first or the pool let it go.
func (r *SandboxReconciler) claim(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod, claim *sandlotv1.PoolClaim) (bool, error) {
	orig := pod.DeepCopy()
	ann, err := claimAnnotations(pod, claim, sbx.Spec.Network)
	if err != nil {
		return false, fmt.Errorf("claim pool pod %s: %w", pod.Name, err)
	}
	pod.Annotations = ann
	pod.Labels[sandlotv1.LabelSandbox] = sbx.Name
	pod.Labels[sandlotv1.LabelSandboxID] = sbx.Status.SandboxID
	pod.OwnerReferences = []metav1.OwnerReference{ownerRef(sbx)}
	err = r.Patch(ctx, pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("claim pool pod %s: %w", pod.Name, err)
}

// claimable are the pool pods sbx may claim, in the order to try them:
// running, on a node placement would choose now (ready, schedulable, the
// template's constraints: a pool pod of a failed or cordoned node is left
// alone), and for a restore claim able to host it, those on a node that
// holds the data first.
func (r *SandboxReconciler) claimable(ctx context.Context, sbx *sandlotv1.Sandbox, pods []corev1.Pod, src resolvedSource, req poolRequest) ([]corev1.Pod, error) {
	cons, err := r.constraintsOf(ctx, sbx)
	if err != nil {
		return nil, err
	}
	nodes := map[string]*corev1.Node{}
	var local, remote []corev1.Pod
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		name := pod.Spec.NodeName
		n, seen := nodes[name]
		if !seen {
			n = &corev1.Node{}
			if err := r.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
				n = nil // gone, or not in the cache: not a node to start on
			}
			nodes[name] = n
		}
		if n == nil || ineligibleFor(n, cons) != "" {
			continue
		}
		if req.restore == nil { // the pool restored the template's base on its node
			local = append(local, pod)
			continue
		}
		switch hostsRestore(&pod, src, n) {
		case hostLocal:
			local = append(local, pod)
		case hostRemote:
			remote = append(remote, pod)
		}
	}
	// Each claimant tries the pods in its own order: in one order, N
	// concurrent claims would all patch the first pod, N-1 lose, all
	// patch the second, and so on (N²/2 patches, most of them conflicts).
	for _, group := range [][]corev1.Pod{local, remote} {
		rand.Shuffle(len(group), func(i, j int) { group[i], group[j] = group[j], group[i] })
	}
	return append(local, remote...), nil
}

type restoreHost int

const (
	hostNone   restoreHost = iota
	hostLocal              // on a node that holds the data
	hostRemote             // on another node that may fetch it
)

// hostsRestore says whether pod (on node) may host src's restore in
// place: the same image and VM size — the shim replaces the VM under the
// pod's container and cgroup — on a node that may restore the data, as
// placement decides for a new pod.
func hostsRestore(pod *corev1.Pod, src resolvedSource, node *corev1.Node) restoreHost {
	a, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
	vm := src.VM
	if err != nil || len(pod.Spec.Containers) == 0 || pod.Spec.Containers[0].Image != vm.Image ||
		a.VCPU != vm.Resources.VCPU || a.MemoryMiB != vm.Resources.MemoryMiB || a.WritableLayerMiB != vm.WritableLayerMiB {
		return hostNone
	}
	switch local, why := src.Data.on(node); {
	case why != "":
		return hostNone
	case local:
		return hostLocal
	}
	return hostRemote
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
func adoptPoolPod(sbx *sandlotv1.Sandbox, pod *corev1.Pod, src resolvedSource, req poolRequest) {
	st := &sbx.Status
	res := src.VM.Resources
	st.Resources = &res
	st.NodeName, st.PodName, st.PodIP = pod.Spec.NodeName, pod.Name, ""
	msg := "claimed warm pool pod " + pod.Name + " on " + pod.Spec.NodeName
	if req.restore == nil {
		st.BaseSnapshot = pod.Annotations[sandlotv1.AnnotationRestoreName]
	} else {
		msg += " to restore " + req.restore.Kind + " " + req.restore.Name + " in"
	}
	st.Phase = sandlotv1.SandboxStarting
	st.Reason, st.Message = "", ""
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
