package sandbox

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/metrics"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
	"github.com/sandlot-dev/sandlot/controllers/volume"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// retryPlacement is how often an unplaceable sandbox is retried besides
// the node events that wake it.
const retryPlacement = 30 * time.Second

// run mirrors the sandbox's pod, or places the sandbox and starts one. It
// returns the pod the sandbox has afterwards (nil: none, or one going).
func (r *Reconciler) run(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource, pod *corev1.Pod) (ctrl.Result, *corev1.Pod, error) {
	st := &sbx.Status
	if pod != nil {
		if pod.DeletionTimestamp != nil && !sandlotv1.ClaimPending(pod.Annotations) {
			if res, handled, err := r.nodeLost(ctx, sbx, pod, pod.Spec.NodeName); handled || err != nil {
				return res, nil, err
			}
		}
		if v, ok := mirrorPod(sbx, src, pod); !ok {
			res, err := r.replacePod(ctx, sbx, pod, v)
			return res, nil, err
		}
		return ctrl.Result{}, pod, nil
	}
	switch {
	case st.PodName != "" && (st.Phase == sandlotv1.SandboxStarting || st.Phase == sandlotv1.SandboxRunning ||
		st.Phase == sandlotv1.SandboxResuming):
		lost, err := r.confirmLost(ctx, sbx)
		if err != nil || !lost {
			return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil, err
		}
		if v, again := vanishedClaimView(sbx); again {
			res, err := r.replacePod(ctx, sbx, nil, v)
			return res, nil, err
		}
		if res, handled, err := r.nodeLost(ctx, sbx, nil, st.NodeName); handled || err != nil {
			return res, nil, err
		}
		setFailed(st, sbx.Generation, sandlotv1.ReasonPodLost, "pod "+st.PodName+" disappeared")
		return ctrl.Result{}, nil, nil
	case src.Fail:
		setFailed(st, sbx.Generation, src.Reason, src.Message)
		return ctrl.Result{}, nil, nil
	case src.Wait:
		setPending(st, sbx.Generation, src.Reason, src.Message)
		return ctrl.Result{}, nil, nil
	}
	return r.startPod(ctx, sbx, src)
}

// mirrorPod writes the sandbox's pod into its status; false (and the
// view, nothing written) when the pod is to be replaced. The reconcile
// that creates or claims a pod mirrors it too, so the pod's first watch
// event finds nothing new to write (one status write less per start).
func mirrorPod(sbx *sandlotv1.Sandbox, src resolvedSource, pod *corev1.Pod) (podView, bool) {
	st := &sbx.Status
	if st.Resources == nil && !src.Wait && !src.Fail {
		res := src.VM.Resources
		st.Resources = &res
	}
	v := viewPod(pod)
	v.StartedAt = notBefore(v.StartedAt, sbx.CreationTimestamp)
	if v.Replace {
		return v, false
	}
	st.PodName, st.NodeName = pod.Name, pod.Spec.NodeName
	if v.Phase == sandlotv1.SandboxRunning && !sandlotv1.ClaimPending(pod.Annotations) {
		// Restored after its node was lost (nodelost.go): done. A claimed
		// pool pod runs before its claim restored anything, and the agent
		// checks the claim against restoringFrom.
		st.RestoringFrom = ""
	}
	if base := sandlotv1.PodSource(pod.Annotations); sbx.Spec.Source.Template != "" && base != nil &&
		base.Kind == sandlotv1.RestoreKindSnapshot && st.BaseSnapshot == "" {
		st.BaseSnapshot = base.Name // from the pod: the write at its creation may have been lost
	}
	scheduledFromPod(st, sbx.Generation, pod)
	applyPodView(st, sbx.Generation, v)
	return v, true
}

// scheduledFromPod records where the sandbox runs when its status does not
// say so yet: the write that created or claimed the pod may have been lost
// to a conflict, and the next reconcile finds the pod by name or label.
func scheduledFromPod(st *sandlotv1.SandboxStatus, gen int64, pod *corev1.Pod) {
	if c := meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionScheduled); c != nil && c.Status == metav1.ConditionTrue {
		return
	}
	reason, msg := sandlotv1.ReasonPlaced, "placed on "+pod.Spec.NodeName
	if _, pool := pod.Labels[sandlotv1.LabelPool]; pool {
		reason, msg = claimReason(pod), "claimed "+poolPodKind(pod)+" "+pod.Name+" on "+pod.Spec.NodeName
	}
	writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionScheduled, metav1.ConditionTrue, reason, msg)
}

// notBefore is when a sandbox started running: its pod's start, but not
// before the sandbox existed (a claimed warm pool pod ran before its
// claim; E2B's startedAt would precede the create).
func notBefore(started *metav1.Time, created metav1.Time) *metav1.Time {
	if started != nil && started.Before(&created) {
		return created.DeepCopy()
	}
	return started
}

// previousPodTerminating reports whether the pod named like the sandbox is
// an earlier one still being deleted (a replaced pod): its name is reused
// only once it is gone.
func (r *Reconciler) previousPodTerminating(ctx context.Context, key types.NamespacedName) (bool, error) {
	pod := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, key, pod); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return pod.DeletionTimestamp != nil, nil
}

// confirmLost rereads the sandbox and its pod past the cache before a
// pod is declared lost: a cached sandbox a status write behind (a pod
// just replaced) or a pod the cache has not seen yet is no loss.
func (r *Reconciler) confirmLost(ctx context.Context, sbx *sandlotv1.Sandbox) (bool, error) {
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Name}
	fresh := &sandlotv1.Sandbox{}
	if err := r.APIReader.Get(ctx, key, fresh); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if fresh.ResourceVersion != sbx.ResourceVersion {
		return false, nil
	}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Status.PodName}, &corev1.Pod{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// replacePod removes a pod its kubelet refused (or forgets one already
// gone: pod nil) and sends the sandbox back to placement; the pod's name
// is reused once it is gone.
func (r *Reconciler) replacePod(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod, v podView) (ctrl.Result, error) {
	st := &sbx.Status
	r.Scheduler.Forget(types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Name})
	// Two steps: first the status says Pending (this reconcile's patch),
	// then the pod goes. The other order, with the status write lost to a
	// conflict, leaves a Starting sandbox without its pod: taken for lost.
	if pod != nil && st.Phase == sandlotv1.SandboxPending && pod.DeletionTimestamp == nil {
		uid := pod.UID
		if err := r.Delete(ctx, pod, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("delete rejected pod %s: %w", pod.Name, err)
		}
	}
	st.Phase, st.NodeName, st.PodIP = sandlotv1.SandboxPending, "", ""
	st.Reason, st.Message = v.Reason, v.Message
	writes.SetCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionScheduled, metav1.ConditionFalse, v.Reason, v.Message)
	writes.SetCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionReady, metav1.ConditionFalse, v.Reason, v.Message)
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// startPod places the sandbox and creates its pod (or claims a warm pool
// pod), and returns it. The pod's name is the sandbox's, so a restarted
// controller finds the pod it created instead of creating another. A
// refused spec.network starts nothing: the sandbox waits for a fix.
func (r *Reconciler) startPod(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource) (ctrl.Result, *corev1.Pod, error) {
	st := &sbx.Status
	if err := specNetworkError(sbx.Spec.Network); err != nil {
		setPending(st, sbx.Generation, sandlotv1.ReasonInvalidNetwork, err.Error())
		return ctrl.Result{}, nil, nil
	}
	vols, waitMsg, err := volume.Resolve(ctx, r.Client, sbx.Namespace, src.VM.VolumeMounts)
	if err != nil || waitMsg != "" {
		setPending(st, sbx.Generation, sandlotv1.ReasonVolumeNotReady, waitMsg)
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil, err
	}
	if claimed, done, res, err := r.tryPoolClaim(ctx, sbx, src); done {
		return res, claimed, err
	}
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Name}
	p, cons, err := r.placeSandbox(ctx, sbx, src)
	if err != nil {
		setPending(st, sbx.Generation, sandlotv1.ReasonPlacementFailed, err.Error())
		return ctrl.Result{}, nil, err
	}
	if p.Node == "" {
		res, err := r.withoutRoom(ctx, sbx, p)
		return res, nil, err
	}
	plan := podspec.Plan{Name: newPodName(sbx), Node: p.Node, SandboxID: st.SandboxID, VM: src.VM, Env: src.Env, Restore: src.restoreFor(p.Node),
		Probe: src.Probe, MilliCPUPerVCPU: r.milliCPUPerVCPU(), Constraints: cons, Network: sbx.Spec.Network,
		PullPolicy: r.ImagePullPolicy, PullSecrets: src.PullSecrets, Volumes: vols}
	pod, err := r.createPod(ctx, sbx, plan)
	if apierrors.IsAlreadyExists(err) {
		if waiting, werr := r.previousPodTerminating(ctx, key); werr != nil || waiting {
			r.Scheduler.Forget(key)
			setPending(st, sbx.Generation, sandlotv1.ReasonPodPending, "waiting for the previous pod "+sbx.Name+" to go")
			return ctrl.Result{RequeueAfter: 500 * time.Millisecond}, nil, werr
		}
		// Ours, from a reconcile whose status write was lost: the next
		// reconcile reads it (and syncs its rules).
		pod, err = nil, nil
	}
	if err != nil {
		r.Scheduler.Forget(key)
		setPending(st, sbx.Generation, sandlotv1.ReasonPodCreateFailed, err.Error())
		return ctrl.Result{}, nil, fmt.Errorf("create pod for sandbox %s: %w", key, err)
	}
	r.Scheduler.Bound(p.Node, key) // its pod is bound: the pool may refill around it
	res := src.VM.Resources
	st.Resources = &res
	if len(src.PerNode) > 0 {
		st.BaseSnapshot = plan.Restore.Name
	}
	st.NodeName, st.PodName, st.PodIP = p.Node, sbx.Name, ""
	st.Phase = sandlotv1.SandboxStarting
	st.Reason, st.Message = "", ""
	writes.SetCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionScheduled, metav1.ConditionTrue, p.Reason, p.Message)
	writes.SetCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionReady, metav1.ConditionFalse,
		sandlotv1.ReasonPodPending, "pod "+sbx.Name+" is pending")
	if pod != nil {
		mirrorPod(sbx, src, pod)
	}
	return ctrl.Result{}, pod, nil
}

// tryPoolClaim gives a template's sandbox one of its warm pool pods when
// one is ready; done says the start ends here (claimed, or failed).
func (r *Reconciler) tryPoolClaim(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource) (*corev1.Pod, bool, ctrl.Result, error) {
	req, ok := poolRequestOf(sbx, src)
	if !ok {
		return nil, false, ctrl.Result{}, nil
	}
	pod, err := r.claimPoolPod(ctx, sbx, src, req)
	if err != nil {
		// Retried with backoff; the status and an Event say why meanwhile.
		setPending(&sbx.Status, sbx.Generation, sandlotv1.ReasonClaimFailed, err.Error())
		return nil, true, ctrl.Result{}, err
	}
	if pod != nil {
		result := "hit"
		if sandlotv1.IsStartSlot(pod.Annotations) {
			result = "slot"
		}
		metrics.PoolClaims.WithLabelValues(req.template, result).Inc()
		adoptPoolPod(sbx, pod, src, req)
		mirrorPod(sbx, src, pod) // a pool pod runs: Running at once
		return pod, true, ctrl.Result{}, nil
	}
	if src.WarmPool > 0 {
		metrics.PoolClaims.WithLabelValues(req.template, "miss").Inc()
	}
	return nil, false, ctrl.Result{}, nil
}

// placeSandbox picks a node for the sandbox among sandlot's nodes that
// its template lets it run on, and returns those constraints for its pod.
func (r *Reconciler) placeSandbox(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource) (placement.Placement, placement.Constraints, error) {
	cons, err := r.constraintsOf(ctx, sbx)
	if err != nil {
		return placement.Placement{}, cons, err
	}
	class, err := podspec.RuntimeClassTerms(ctx, r.Client)
	if err != nil {
		return placement.Placement{}, cons, err
	}
	overhead := class.Overhead
	want := placement.DemandOf(src.VM.Resources, overhead, r.milliCPUPerVCPU())
	nodes := &corev1.NodeList{}
	// Read only (place), and every sandlot node: not copied.
	if err := r.List(ctx, nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return placement.Placement{}, cons, fmt.Errorf("list nodes: %w", err)
	}
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Name}
	fresh := sbx.Status.NodeName == "" && sbx.Status.PodName == ""
	p, err := r.Scheduler.Place(ctx, key, fresh, placement.Request{Nodes: nodes.Items, Demand: want, Source: src.Data,
		Constraints: cons.And(class.Constraints)}, overhead)
	return p, cons, err
}

// constraintsOf is where a sandbox may run: its template's tolerations
// and node selector; for a clone, those of the template its snapshot was
// taken from (status.template). With no template (gone, or an imported
// snapshot) there are none: no tolerations, any node.
func (r *Reconciler) constraintsOf(ctx context.Context, sbx *sandlotv1.Sandbox) (placement.Constraints, error) {
	name := sbx.Spec.Source.Template
	if snap := sbx.Spec.Source.Snapshot; snap != "" {
		s := &sandlotv1.Snapshot{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: snap}, s); err != nil {
			return placement.Constraints{}, client.IgnoreNotFound(fmt.Errorf("get snapshot %s: %w", snap, err))
		}
		name = s.Status.Template
	}
	if name == "" {
		return placement.Constraints{}, nil
	}
	tpl := &sandlotv1.Template{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: name}, tpl); err != nil {
		return placement.Constraints{}, client.IgnoreNotFound(fmt.Errorf("get template %s: %w", name, err))
	}
	return placement.TemplateConstraints(tpl), nil
}
