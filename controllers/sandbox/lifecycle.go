package sandbox

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/data"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// setExpiry counts the timeout from the creation or the last resume. The
// spec's timeout wins, then the source's; when the source cannot be read
// (a template deleted since) the expiry already set is kept.
func (r *Reconciler) setExpiry(sbx *sandlotv1.Sandbox, src resolvedSource) {
	base := sbx.CreationTimestamp
	if sbx.Status.LastResumedAt != nil {
		base = *sbx.Status.LastResumedAt
	}
	switch {
	case sbx.Spec.TimeoutSeconds != nil:
		sbx.Status.ExpiresAt = expiry(base, *sbx.Spec.TimeoutSeconds)
	case !src.Wait && !src.Fail:
		sbx.Status.ExpiresAt = expiry(base, src.TimeoutSeconds)
	case sbx.Status.ExpiresAt == nil:
		sbx.Status.ExpiresAt = expiry(base, sandlotv1.DefaultTimeoutSeconds)
	}
}

// dormant: a sandbox being paused, paused or being resumed does not expire.
func dormant(sbx *sandlotv1.Sandbox) bool {
	switch sbx.Status.Phase {
	case sandlotv1.SandboxPausing, sandlotv1.SandboxPaused, sandlotv1.SandboxResuming:
		return true
	}
	return sbx.Spec.Paused
}

// enforceTimeout deletes (or pauses) an expired sandbox. A paused sandbox
// does not expire: pause is how E2B keeps one beyond its timeout.
func (r *Reconciler) enforceTimeout(ctx context.Context, sbx *sandlotv1.Sandbox) (bool, error) {
	if dormant(sbx) || sbx.Status.ExpiresAt == nil || r.now().Before(sbx.Status.ExpiresAt.Time) {
		return false, nil
	}
	if sbx.Spec.OnTimeout == sandlotv1.TimeoutPause && !sbx.Status.Phase.Terminal() {
		log.FromContext(ctx).Info("sandbox expired: pausing", "expiresAt", sbx.Status.ExpiresAt)
		// Guarded by the resourceVersion read: a reconcile of a stale copy
		// must not pause again a sandbox its user just resumed.
		patch := client.MergeFromWithOptions(sbx.DeepCopy(), client.MergeFromWithOptimisticLock{})
		sbx.Spec.Paused = true
		if err := r.Patch(ctx, sbx, patch); err != nil {
			return true, fmt.Errorf("pause expired sandbox %s: %w", sbx.Name, err)
		}
		return true, nil
	}
	log.FromContext(ctx).Info("sandbox expired: deleting", "expiresAt", sbx.Status.ExpiresAt)
	sbx.Status.Reason, sbx.Status.Message = sandlotv1.ReasonExpired, "timeout passed at "+sbx.Status.ExpiresAt.UTC().Format(time.RFC3339)
	// Likewise: nor delete one whose timeout was just extended.
	rv := sbx.ResourceVersion
	if err := r.Delete(ctx, sbx, client.Preconditions{ResourceVersion: &rv}); client.IgnoreNotFound(err) != nil {
		return true, fmt.Errorf("delete expired sandbox %s: %w", sbx.Name, err)
	}
	return true, nil
}

// untilExpiry makes sure the sandbox is looked at again when it expires.
func (r *Reconciler) untilExpiry(sbx *sandlotv1.Sandbox, res ctrl.Result) ctrl.Result {
	if dormant(sbx) || sbx.Status.ExpiresAt == nil {
		return res
	}
	left := sbx.Status.ExpiresAt.Sub(r.now()) + 10*time.Millisecond
	if res.RequeueAfter == 0 || left < res.RequeueAfter {
		res.RequeueAfter = left
	}
	return res
}

func podNameOf(sbx *sandlotv1.Sandbox) string {
	if sbx.Status.PodName != "" {
		return sbx.Status.PodName
	}
	return sbx.Name
}

// currentPod is the sandbox's pod, or nil. A pod the cache does not show
// is looked up on the API server before it is taken to be gone.
func (r *Reconciler) currentPod(ctx context.Context, sbx *sandlotv1.Sandbox) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: podNameOf(sbx)}
	err := r.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) && sbx.Status.PodName != "" {
		err = r.APIReader.Get(ctx, key, pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get pod %s: %w", key, err)
	case !metav1.IsControlledBy(pod, sbx):
		return nil, fmt.Errorf("pod %s exists and is not owned by sandbox %s", key, sbx.Name)
	}
	return pod, nil
}

// pausedSandbox is the sandbox's pause package, or nil; as for pods, an
// absence that would end the sandbox is confirmed on the API server.
func (r *Reconciler) pausedSandbox(ctx context.Context, sbx *sandlotv1.Sandbox) (*sandlotv1.PausedSandbox, error) {
	pkg := &sandlotv1.PausedSandbox{}
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Name}
	err := r.Get(ctx, key, pkg)
	if apierrors.IsNotFound(err) && (sbx.Status.Phase == sandlotv1.SandboxPaused ||
		sbx.Status.Phase == sandlotv1.SandboxPausing || sbx.Status.Phase == sandlotv1.SandboxResuming) {
		err = r.APIReader.Get(ctx, key, pkg)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get paused sandbox %s: %w", key, err)
	case !metav1.IsControlledBy(pkg, sbx):
		return nil, fmt.Errorf("paused sandbox %s exists and is not owned by sandbox %s", key, sbx.Name)
	}
	return pkg, nil
}

// carryOut performs the writes a pause decision asks for.
func (r *Reconciler) carryOut(ctx context.Context, sbx *sandlotv1.Sandbox, d pauseDecision,
	pod *corev1.Pod, pkg *sandlotv1.PausedSandbox) error {
	if d.CreatePaused {
		if err := r.Create(ctx, buildPausedSandbox(sbx, pod, r.PausedExpiry)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create paused sandbox %s: %w", sbx.Name, err)
		}
	}
	if d.DeletePod {
		// By UID: the cache may hold the pod a newer one replaced.
		if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete paused pod %s: %w", pod.Name, err)
		}
	}
	if d.DeletePaused {
		if err := r.Delete(ctx, pkg, client.Preconditions{UID: &pkg.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("release paused sandbox %s: %w", pkg.Name, err)
		}
		if d.Resuming { // the resumed pod runs: the timeout starts again
			now := metav1.NewTime(r.now())
			sbx.Status.LastResumedAt = &now
		}
	}
	return nil
}

// applyDecision writes a decision that does not run the pod flow.
func applyDecision(st *sandlotv1.SandboxStatus, gen int64, d pauseDecision) {
	if d.Fail {
		setFailed(st, gen, d.Reason, d.Message)
		return
	}
	st.Phase = d.Phase
	st.Reason, st.Message = d.Reason, d.Message
	if d.Phase == sandlotv1.SandboxPaused || d.Phase == sandlotv1.SandboxPending {
		st.NodeName, st.PodName, st.PodIP = "", "", ""
	}
	writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionReady, metav1.ConditionFalse, d.Reason, d.Message)
}

// restoreFromPackage points the run flow at the pause package: same VM,
// its data where the agent put it; resumed by a boot on its disk when by
// says so.
func restoreFromPackage(src resolvedSource, pkg *sandlotv1.PausedSandbox, by sandlotv1.ResumeMode) resolvedSource {
	src.Wait, src.Fail = false, false
	src.VM = pkg.Spec.VM
	src.Data = snapshotData(pkg.Status.DataStatus)
	src.Restore = sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindPausedSandbox, Name: pkg.Name, UID: string(pkg.UID), Location: pkg.Status.Location,
		Boot: by == sandlotv1.ResumeBoot}
	src.PerNode = nil // not the template's base: the package (which may lay its pages over that base)
	return src
}

// buildPausedSandbox is the package of a sandbox's pod; it expires after
// expiry when that is set.
func buildPausedSandbox(sbx *sandlotv1.Sandbox, pod *corev1.Pod, expiry time.Duration) *sandlotv1.PausedSandbox {
	var expire *int64
	if s := int64(expiry / time.Second); s > 0 {
		expire = &s
	}
	return &sandlotv1.PausedSandbox{
		ObjectMeta: metav1.ObjectMeta{
			Name:            sbx.Name,
			Namespace:       sbx.Namespace,
			Labels:          map[string]string{sandlotv1.LabelNode: pod.Spec.NodeName, sandlotv1.LabelSandbox: sbx.Name},
			OwnerReferences: []metav1.OwnerReference{ownerRef(sbx)},
			Finalizers:      []string{sandlotv1.FinalizerInUse},
		},
		Spec: sandlotv1.PausedSandboxSpec{
			SandboxID: sbx.Status.SandboxID,
			NodeName:  pod.Spec.NodeName,
			PodName:   pod.Name,
			VM:        data.VMSpecOfPod(pod, sbx.Status.Resources),
			DependsOn: data.RestoredFrom(sbx, pod),

			ExpireAfterSeconds: expire,
		},
	}
}
