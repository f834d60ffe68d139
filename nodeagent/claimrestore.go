package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
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
func (r *VMReadyReconciler) restoreClaim(ctx context.Context, c Control, pod *corev1.Pod, id *controlapi.SetIdentityRequest) error {
	ann, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
	if err != nil {
		return fmt.Errorf("claim annotations of %s: %w", pod.Name, err)
	}
	ref := ann.Claim.Restore
	if err := r.guard.authorizeClaim(ctx, pod, *ann.Claim); err != nil {
		return err
	}
	key, err := stageapi.Key(ref.Kind, ref.UID)
	if err != nil {
		return err
	}
	began := time.Now()
	dir, release, err := r.layout.open(ctx, key)
	if reason := refusal(err); reason != "" { // the data is bad: its object says so, as a stage's refusal does
		r.refusals.report(ctx, ref.Kind, ref.UID, reason, err)
	}
	if err != nil {
		return fmt.Errorf("open %s %s on %s: %w", ref.Kind, ref.Name, r.Name, err)
	}
	defer release() // the VM has mapped its files once Restore answers
	opened := time.Since(began)
	resp, err := c.Restore(ctx, &controlapi.RestoreRequest{Dir: dir, Identity: id, RequestId: claimID(pod)})
	if err != nil {
		return fmt.Errorf("restore %s %s into pool pod %s: %w", ref.Kind, ref.Name, pod.Name, err)
	}
	log.FromContext(ctx).Info("warm pool pod claimed: VM restored as the sandbox", "pod", pod.Name, "sandbox", ann.Claim.Sandbox,
		"from", ref.Kind+"/"+ref.Name, "opened", opened, "restored", time.Duration(resp.GetTookNanos()))
	return nil
}

// claimID names a claim for the shim's idempotent restore.
func claimID(pod *corev1.Pod) string {
	sum := sha256.Sum256([]byte(string(pod.UID) + "\n" + pod.Annotations[sandlotv1.AnnotationClaim]))
	return hex.EncodeToString(sum[:16])
}

// authorizeClaim refuses unless pod, a warm pool pod of this node, is
// controlled by the Sandbox that claimed it and that Sandbox restores the
// claim's data (its source Snapshot, or its own pause package) in the
// pod's namespace — the shim's stage check of its owner and data: a claim
// annotation naming other data restores nothing.
func (g *stageGuard) authorizeClaim(ctx context.Context, pod *corev1.Pod, claim sandlotv1.PoolClaim) error {
	ref := claim.Restore
	why, err := g.claimDenial(ctx, pod, claim)
	switch {
	case err != nil:
		return fmt.Errorf("check the claim of pool pod %s: %w", pod.Name, err)
	case why != "":
		return fmt.Errorf("%w: pool pod %s/%s may not restore %s %s/%s for Sandbox %s: %s", errStageRefused,
			pod.Namespace, pod.Name, ref.Kind, pod.Namespace, ref.Name, claim.Sandbox, why)
	}
	return nil
}

// claimDenial says why pod may not restore its claim's data, "" when it may.
func (g *stageGuard) claimDenial(ctx context.Context, pod *corev1.Pod, claim sandlotv1.PoolClaim) (string, error) {
	if pod.Spec.NodeName != g.node {
		return fmt.Sprintf("it is on node %q, not %s", pod.Spec.NodeName, g.node), nil
	}
	owner, why := sandlotController(pod)
	switch {
	case why != "":
		return why, nil
	case owner.Kind != "Sandbox" || owner.Name != claim.Sandbox:
		return fmt.Sprintf("its controller is %s %s, not the claiming Sandbox", owner.Kind, owner.Name), nil
	}
	c := &stageCheck{stageGuard: g, reads: map[string]readResult{}, verdicts: map[string]string{}}
	return c.ownerDenial(ctx, pod.Namespace, owner, claim.Restore.Kind, claim.Restore.UID, claim.Restore.Name)
}

// claimEnv is the claiming sandbox's env: its template's (the pool pod's
// own env), then what an older controller put in the claim, then the
// sandbox's spec.env sealed in the claim, each over the one before.
func claimEnv(pod *corev1.Pod, claim sandlotv1.PoolClaim, own map[string]string) map[string]string {
	env := map[string]string{}
	for _, c := range pod.Spec.Containers {
		if c.Name != sandlotv1.ContainerName {
			continue
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				env[e.Name] = e.Value
			}
		}
	}
	maps.Copy(env, claim.Env)
	maps.Copy(env, own)
	return env
}
