package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// retryPlacement is how often an unplaceable sandbox is retried besides
// the node events that wake it.
const retryPlacement = 30 * time.Second

// run mirrors the sandbox's pod, or places the sandbox and starts one.
func (r *SandboxReconciler) run(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource, pod *corev1.Pod) (ctrl.Result, error) {
	st := &sbx.Status
	if pod != nil {
		if st.Resources == nil && !src.Wait && !src.Fail {
			res := src.VM.Resources
			st.Resources = &res
		}
		v := viewPod(pod)
		if v.Replace {
			return r.replacePod(ctx, sbx, pod, v)
		}
		st.PodName, st.NodeName = pod.Name, pod.Spec.NodeName
		if base := pod.Annotations[sandlotv1.AnnotationRestoreName]; sbx.Spec.Source.Template != "" &&
			pod.Annotations[sandlotv1.AnnotationRestoreKind] == "Snapshot" && st.BaseSnapshot == "" {
			st.BaseSnapshot = base // from the pod: the write at its creation may have been lost
		}
		applyPodView(st, sbx.Generation, v)
		return ctrl.Result{}, nil
	}
	switch {
	case st.PodName != "" && (st.Phase == sandlotv1.SandboxStarting || st.Phase == sandlotv1.SandboxRunning ||
		st.Phase == sandlotv1.SandboxResuming):
		lost, err := r.confirmLost(ctx, sbx)
		if err != nil || !lost {
			return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, err
		}
		setFailed(st, sbx.Generation, sandlotv1.ReasonPodLost, "pod "+st.PodName+" disappeared")
		return ctrl.Result{}, nil
	case src.Fail:
		setFailed(st, sbx.Generation, src.Reason, src.Message)
		return ctrl.Result{}, nil
	case src.Wait:
		setPending(st, sbx.Generation, src.Reason, src.Message)
		return ctrl.Result{}, nil
	}
	return r.startPod(ctx, sbx, src)
}

// previousPodTerminating reports whether the pod named like the sandbox is
// an earlier one still being deleted (a replaced pod): its name is reused
// only once it is gone.
func (r *SandboxReconciler) previousPodTerminating(ctx context.Context, key types.NamespacedName) (bool, error) {
	pod := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, key, pod); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return pod.DeletionTimestamp != nil, nil
}

// confirmLost rereads the sandbox and its pod past the cache before a
// pod is declared lost: a cached sandbox a status write behind (a pod
// just replaced) or a pod the cache has not seen yet is no loss.
func (r *SandboxReconciler) confirmLost(ctx context.Context, sbx *sandlotv1.Sandbox) (bool, error) {
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

// replacePod removes a pod its kubelet refused and sends the sandbox back
// to placement; the pod's name is reused once it is gone.
func (r *SandboxReconciler) replacePod(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod, v podView) (ctrl.Result, error) {
	st := &sbx.Status
	r.assumed.forget(types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Name})
	// Two steps: first the status says Pending (this reconcile's patch),
	// then the pod goes. The other order, with the status write lost to a
	// conflict, leaves a Starting sandbox without its pod: taken for lost.
	if st.Phase == sandlotv1.SandboxPending && pod.DeletionTimestamp == nil {
		uid := pod.UID
		if err := r.Delete(ctx, pod, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("delete rejected pod %s: %w", pod.Name, err)
		}
	}
	st.Phase, st.NodeName, st.PodIP = sandlotv1.SandboxPending, "", ""
	st.Reason, st.Message = v.Reason, v.Message
	setCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionScheduled, metav1.ConditionFalse, v.Reason, v.Message)
	setCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionReady, metav1.ConditionFalse, v.Reason, v.Message)
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// startPod places the sandbox and creates its pod. The pod's name is the
// sandbox's, so a restarted controller finds the pod it created instead of
// creating another.
func (r *SandboxReconciler) startPod(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource) (ctrl.Result, error) {
	st := &sbx.Status
	if len(src.PerNode) > 0 && sbx.Spec.Source.Template != "" {
		pod, err := r.claimPoolPod(ctx, sbx, src)
		if err != nil {
			// Retried with backoff; the status and an Event say why meanwhile.
			setPending(st, sbx.Generation, sandlotv1.ReasonClaimFailed, err.Error())
			return ctrl.Result{}, err
		}
		if pod != nil {
			poolClaims.WithLabelValues(sbx.Spec.Source.Template, "hit").Inc()
			adoptPoolPod(sbx, pod, src)
			return ctrl.Result{}, nil
		}
		if src.WarmPool > 0 {
			poolClaims.WithLabelValues(sbx.Spec.Source.Template, "miss").Inc()
		}
	}
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Name}
	p, err := r.placeSandbox(ctx, key, src)
	if err != nil {
		setPending(st, sbx.Generation, sandlotv1.ReasonPlacementFailed, err.Error())
		return ctrl.Result{}, err
	}
	if p.Node == "" {
		setPending(st, sbx.Generation, p.Reason, p.Message)
		return ctrl.Result{RequeueAfter: retryPlacement}, nil
	}
	plan := podPlan{Name: sbx.Name, Node: p.Node, SandboxID: st.SandboxID, VM: src.VM, Env: src.Env, Restore: src.restoreFor(p.Node),
		Probe: src.Probe, MilliCPUPerVCPU: r.milliCPUPerVCPU()}
	pod, err := buildPod(sbx, plan)
	if err == nil {
		err = r.Create(ctx, pod)
	}
	if apierrors.IsAlreadyExists(err) {
		if waiting, werr := r.previousPodTerminating(ctx, key); werr != nil || waiting {
			r.assumed.forget(key)
			setPending(st, sbx.Generation, sandlotv1.ReasonPodPending, "waiting for the previous pod "+sbx.Name+" to go")
			return ctrl.Result{RequeueAfter: 500 * time.Millisecond}, werr
		}
		err = nil // ours, from a reconcile whose status write was lost
	}
	if err != nil {
		r.assumed.forget(key)
		setPending(st, sbx.Generation, sandlotv1.ReasonPodCreateFailed, err.Error())
		return ctrl.Result{}, fmt.Errorf("create pod for sandbox %s: %w", key, err)
	}
	res := src.VM.Resources
	st.Resources = &res
	if len(src.PerNode) > 0 {
		st.BaseSnapshot = plan.Restore.Name
	}
	st.NodeName, st.PodName, st.PodIP = p.Node, sbx.Name, ""
	st.Phase = sandlotv1.SandboxStarting
	st.Reason, st.Message = "", ""
	setCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionScheduled, metav1.ConditionTrue, p.Reason, p.Message)
	setCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionReady, metav1.ConditionFalse,
		sandlotv1.ReasonPodPending, "pod "+sbx.Name+" created on "+p.Node)
	return ctrl.Result{}, nil
}

// placeSandbox picks a node for the sandbox among sandlot's nodes.
func (r *SandboxReconciler) placeSandbox(ctx context.Context, key types.NamespacedName, src resolvedSource) (placement, error) {
	overhead, err := r.overhead(ctx)
	if err != nil {
		return placement{}, err
	}
	want := demandOf(src.VM.Resources, overhead, r.milliCPUPerVCPU())
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}); err != nil {
		return placement{}, fmt.Errorf("list nodes: %w", err)
	}
	return r.placeAndAssume(ctx, key, placementRequest{Nodes: nodes.Items, Demand: want, Source: src.Data}, overhead)
}

// placeAndAssume places a sandbox and records the placement before any
// other worker reads the nodes' usage: with several workers, placements
// are serialised here and nowhere else.
func (r *SandboxReconciler) placeAndAssume(ctx context.Context, key types.NamespacedName, req placementRequest,
	overhead corev1.ResourceList) (placement, error) {
	r.placeMu.Lock()
	defer r.placeMu.Unlock()
	used, err := r.usage(ctx, key, overhead)
	if err != nil {
		return placement{}, err
	}
	req.Used = used
	p := place(req)
	if p.Node != "" {
		r.assumed.assume(key, p.Node, req.Demand)
	}
	return p, nil
}

// overhead is the per-VM cost the sandlot RuntimeClass declares.
func (r *SandboxReconciler) overhead(ctx context.Context) (corev1.ResourceList, error) {
	rc := &nodev1.RuntimeClass{}
	err := r.Get(ctx, types.NamespacedName{Name: sandlotv1.RuntimeClassName}, rc)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil // pod creation will say the RuntimeClass is missing
	case err != nil:
		return nil, fmt.Errorf("get runtimeclass %s: %w", sandlotv1.RuntimeClassName, err)
	case rc.Overhead == nil:
		return nil, nil
	}
	return rc.Overhead.PodFixed, nil
}

// usage sums, per node, what the sandboxes placed there take, including
// placements made by this controller that its cache does not show yet.
func (r *SandboxReconciler) usage(ctx context.Context, self types.NamespacedName, overhead corev1.ResourceList) (map[string]demand, error) {
	list := &sandlotv1.SandboxList{}
	if err := r.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	used := map[string]demand{}
	placed := map[types.NamespacedName]bool{}
	for i := range list.Items {
		s := &list.Items[i]
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if key == self || !occupiesNode(s) {
			continue
		}
		placed[key] = true
		used[s.Status.NodeName] = used[s.Status.NodeName].add(demandOf(*s.Status.Resources, overhead, r.milliCPUPerVCPU()))
	}
	for key, a := range r.assumed.pending(placed) {
		if key != self {
			used[a.node] = used[a.node].add(a.demand)
		}
	}
	return used, nil
}

// occupiesNode: a sandbox takes room on its node from placement until its
// pod is gone (paused or terminal sandboxes have none running).
func occupiesNode(s *sandlotv1.Sandbox) bool {
	return s.Status.NodeName != "" && s.Status.Resources != nil &&
		s.Status.Phase != sandlotv1.SandboxPaused && !s.Status.Phase.Terminal()
}

// assumedPlacements remembers placements until the cache reflects them,
// as the scheduler's assume cache does, so two sandboxes reconciled back
// to back do not both take the last room on a node.
type assumedPlacements struct {
	mu sync.Mutex
	m  map[types.NamespacedName]assumption
}

type assumption struct {
	node   string
	demand demand
	at     time.Time
}

func (a *assumedPlacements) assume(key types.NamespacedName, node string, d demand) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.NamespacedName]assumption{}
	}
	a.m[key] = assumption{node: node, demand: d, at: time.Now()}
}

func (a *assumedPlacements) forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, key)
}

// pending returns the assumptions the cache does not show yet and drops
// the ones it does (or that are too old to matter).
func (a *assumedPlacements) pending(inCache map[types.NamespacedName]bool) map[types.NamespacedName]assumption {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[types.NamespacedName]assumption{}
	for key, v := range a.m {
		if inCache[key] || time.Since(v.at) > time.Minute {
			delete(a.m, key)
			continue
		}
		out[key] = v
	}
	return out
}
