package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// restoreClaim carries out a claim that restores data (a sandbox from a
// Snapshot, a resume from its PausedSandbox) in a warm pool pod: the pod
// exists and runs, so the start is the restore alone. The data is checked
// as a shim's stage request is (the claiming Sandbox restores it, in the
// pod's namespace), opened on this node (downloaded when it is remote),
// and the shim replaces the pool's paused VM with its restore, taking the
// sandbox's identity in the same push. Done twice (an agent that died
// before markActivated), the shim's request ID makes the second a no-op.
func (r *VMReadyReconciler) restoreClaim(ctx context.Context, c Control, pod *corev1.Pod, id *controlapi.SetIdentityRequest) (time.Duration, error) {
	ann, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
	if err != nil {
		return 0, fmt.Errorf("claim annotations of %s: %w", pod.Name, err)
	}
	ref := ann.Claim.Restore
	if err := r.guard.authorizeClaim(ctx, pod, *ann.Claim); err != nil {
		return 0, err
	}
	key, err := stageapi.Key(ref.Kind, ref.UID)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	dir, release, err := r.layout.open(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("open %s %s on %s: %w", ref.Kind, ref.Name, r.Name, err)
	}
	defer release() // the VM has mapped its files once Restore answers
	opened := time.Since(began)
	resp, err := c.Restore(ctx, &controlapi.RestoreRequest{Dir: dir, Identity: id, RequestId: claimID(pod)})
	if err != nil {
		return 0, fmt.Errorf("restore %s %s into pool pod %s: %w", ref.Kind, ref.Name, pod.Name, err)
	}
	took := time.Duration(resp.GetTookNanos())
	log.FromContext(ctx).Info("warm pool pod claimed: VM restored as the sandbox", "pod", pod.Name, "sandbox", ann.Claim.Sandbox,
		"from", ref.Kind+"/"+ref.Name, "opened", opened, "restored", took)
	return took, nil
}

// claimID names a claim for the shim's idempotent restore.
func claimID(pod *corev1.Pod) string {
	sum := sha256.Sum256([]byte(string(pod.UID) + "\n" + pod.Annotations[sandlotv1.AnnotationClaim]))
	return hex.EncodeToString(sum[:16])
}

// authorizeClaim refuses unless pod, a warm pool pod of this node, is
// controlled by the Sandbox that claimed it and that Sandbox restores the
// claim's data (its source Snapshot, or its own pause package) in the
// pod's namespace: a claim annotation naming other data restores nothing.
func (g *stageGuard) authorizeClaim(ctx context.Context, pod *corev1.Pod, claim sandlotv1.PoolClaim) error {
	ref := claim.Restore
	owner := metav1.GetControllerOf(pod)
	if pod.Spec.NodeName != g.node {
		return fmt.Errorf("%w: pool pod %s/%s is on node %q, not %s", errStageRefused, pod.Namespace, pod.Name, pod.Spec.NodeName, g.node)
	}
	if owner == nil || owner.Kind != "Sandbox" || owner.Name != claim.Sandbox {
		return fmt.Errorf("%w: pool pod %s/%s is not controlled by Sandbox %s, which claims it", errStageRefused, pod.Namespace, pod.Name, claim.Sandbox)
	}
	if gv, err := schema.ParseGroupVersion(owner.APIVersion); err != nil || gv.Group != sandlotv1.GroupVersion.Group {
		return fmt.Errorf("%w: pool pod %s/%s is controlled by %s %s, not sandlot's", errStageRefused, pod.Namespace, pod.Name, owner.APIVersion, owner.Kind)
	}
	c := &stageCheck{stageGuard: g, reads: map[string]readResult{}, verdicts: map[string]string{}}
	why, err := c.ownerDenial(ctx, pod.Namespace, owner, ref.Kind, ref.UID, ref.Name)
	switch {
	case err != nil:
		return fmt.Errorf("check the claim of pool pod %s: %w", pod.Name, err)
	case why != "":
		return fmt.Errorf("%w: pool pod %s/%s may not restore %s %s/%s for Sandbox %s: %s", errStageRefused,
			pod.Namespace, pod.Name, ref.Kind, pod.Namespace, ref.Name, claim.Sandbox, why)
	}
	return nil
}
