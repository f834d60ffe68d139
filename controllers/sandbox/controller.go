// Package controllers holds sandlot's reconcilers. They decide and write
// Kubernetes objects only; node work is done by the node agent.
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
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/metrics"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
	"github.com/sandlot-dev/sandlot/controllers/template"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// Reconciler places a Sandbox, runs it as a Pod, mirrors the Pod
// into its status, pauses and resumes it through a PausedSandbox, and
// enforces its timeout.
type Reconciler struct {
	client.Client
	// Recorder emits an Event per status transition (nil: none).
	Recorder events.EventRecorder
	// APIReader reads past the cache, to confirm that something is gone
	// before acting on its absence (a cache lags its own writes).
	APIReader client.Reader
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// Workers is how many Sandboxes are reconciled at once (default 1).
	Workers int
	// MilliCPUPerVCPU is the CPU a pod requests per vCPU (default 1000: a
	// core each; less overcommits the nodes' CPUs).
	MilliCPUPerVCPU int64
	// ImagePullPolicy is the pull policy of sandbox pods (the operator's;
	// "": IfNotPresent).
	ImagePullPolicy corev1.PullPolicy
	// PausedExpiry is how long a pause package is kept (0: until the
	// sandbox is killed, as E2B does).
	PausedExpiry time.Duration
	// Scheduler places the sandboxes; SetupWithManager makes it if nil
	// and fills in what it leaves unset. Its Holds are shared with the
	// template Reconciler.
	Scheduler *placement.Scheduler

	// bases remembers each template's Ready bases between changes
	// (SetupWithManager makes it; nil: read at every start).
	bases *template.BaseMemo

	// written skips reconciles of a cached copy older than our last write.
	written ownWrites
	// tokens keeps the token Secrets (SetupWithManager makes it).
	tokens *podspec.Tokens
}

// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes/finalizers,verbs=update
// +kubebuilder:rbac:groups=sandlot.dev,resources=pausedsandboxes,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=volumes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch

// Reconcile: get, finalizer, the phase functions, one status patch.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sbx := &sandlotv1.Sandbox{}
	if err := r.Get(ctx, req.NamespacedName, sbx); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.forget(req.NamespacedName)
			r.tokens.Forget(req.NamespacedName)
			return ctrl.Result{}, r.tokens.ReleaseOrphan(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if r.written.stale(req.NamespacedName, sbx.ResourceVersion) {
		// The write's own watch event reconciles again; the requeue is a
		// backstop should that event be missed.
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	if sbx.DeletionTimestamp != nil {
		return r.finalize(ctx, sbx)
	}
	if controllerutil.AddFinalizer(sbx, sandlotv1.FinalizerSandboxVM) {
		if err := r.Update(ctx, sbx); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to sandbox %s: %w", req, err)
		}
	}
	orig := sbx.DeepCopy()
	res, err := r.reconcileSandbox(ctx, sbx)
	sbx.Status.ObservedGeneration = sbx.Generation
	if perr := writes.PatchStatus(ctx, r.Client, r.Recorder, orig, sbx); perr != nil {
		if err == nil {
			err = perr
		}
	} else {
		r.written.wrote(req.NamespacedName, orig.ResourceVersion, sbx.ResourceVersion)
		metrics.ObserveStart(orig, sbx, r.now())
		metrics.ObserveCreateFailure(orig, sbx)
	}
	return res, err
}

// staleRetry: how soon a reconcile skipped for a stale cached copy runs
// again if the watch event of the write that outdated it never comes.
const staleRetry = 2 * time.Second

func (r *Reconciler) reconcileSandbox(ctx context.Context, sbx *sandlotv1.Sandbox) (ctrl.Result, error) {
	st := &sbx.Status
	st.SandboxID = sandlotv1.SandboxIDFor(sbx.UID)
	st.Source = sourceName(sbx.Spec.Source)
	if st.Phase == "" {
		st.Phase = sandlotv1.SandboxPending
	}
	if st.Phase.Terminal() {
		// Nothing is started again after the end; the object still goes
		// at its expiry, like a running one.
		expired, err := r.enforceTimeout(ctx, sbx)
		if expired || err != nil {
			return ctrl.Result{}, err
		}
		return r.untilExpiry(sbx, ctrl.Result{}), nil
	}
	src, err := r.resolveSource(ctx, sbx)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.setExpiry(sbx, src)
	if expired, err := r.enforceTimeout(ctx, sbx); expired || err != nil {
		return ctrl.Result{}, err
	}
	lost, err := r.tokens.Ensure(ctx, sbx, func() (bool, error) {
		pod, err := r.currentPod(ctx, sbx)
		return pod != nil, err
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	ready := meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionReady).DeepCopy()
	res, err := r.lifecycle(ctx, sbx, src)
	if lost {
		podspec.MarkTokenLost(sbx, ready)
	}
	return r.untilExpiry(sbx, res), err
}

// lifecycle runs the pause/resume decision, then the run flow.
func (r *Reconciler) lifecycle(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource) (ctrl.Result, error) {
	pod, err := r.currentPod(ctx, sbx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.syncPodNetwork(ctx, sbx, pod); err != nil {
		return ctrl.Result{}, err
	}
	pkg, err := r.pausedSandbox(ctx, sbx)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := decidePause(pauseWorld{Paused: sbx.Spec.Paused || moving(sbx, pod, pkg), Phase: sbx.Status.Phase, Pod: pod, Package: pkg})
	if err := r.carryOut(ctx, sbx, d, pod, pkg); err != nil {
		return ctrl.Result{}, err
	}
	if !d.Run {
		applyDecision(&sbx.Status, sbx.Generation, d)
		if d.DeletePod {
			pod = nil
		}
		observeNetwork(sbx, pod)
		return ctrl.Result{}, nil
	}
	if d.Restore {
		src = restoreFromPackage(src, pkg, sbx.Spec.ResumeBy)
		if sbx.Status.Phase == sandlotv1.SandboxPaused {
			// The resume begins: the timeout counts from now (again when
			// the package is released), so a wait for the node — or for the
			// paused pod to go — is not taken for an expiry.
			now := metav1.NewTime(r.now())
			sbx.Status.LastResumedAt = &now
			r.setExpiry(sbx, src)
		}
	}
	res, live, err := r.run(ctx, sbx, src, pod)
	observeNetwork(sbx, live)
	if d.Resuming && resumePending(sbx.Status.Phase, live) {
		markResuming(sbx, live)
	}
	if d.Reason != "" && !sbx.Status.Phase.Terminal() {
		sbx.Status.Reason, sbx.Status.Message = d.Reason, d.Message
	}
	return res, err
}

// observeNetwork shows in the status the rules the node enforces on the
// sandbox's live pod (nil: none).
func observeNetwork(sbx *sandlotv1.Sandbox, pod *corev1.Pod) {
	if !podLive(pod) {
		pod = nil
	}
	applyNetworkView(&sbx.Status, sbx.Generation, viewNetwork(sbx.Spec.Network, specNetworkError(sbx.Spec.Network), pod))
}

// finalize removes the Pod (and with it the VM) and any pause package,
// and once the Pod is really gone the token, then lets the Sandbox go.
// The token goes last: while the VM may still run, its token stays
// readable, and a held token Secret is released only by this (or, for a
// Sandbox gone without it, Tokens.ReleaseOrphan).
func (r *Reconciler) finalize(ctx context.Context, sbx *sandlotv1.Sandbox) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(sbx, sandlotv1.FinalizerSandboxVM) {
		return ctrl.Result{}, nil
	}
	// Most sandboxes never paused: the cache says so without a request.
	if err := r.deleteOwned(ctx, sbx, &sandlotv1.PausedSandbox{}, sbx.Name); err != nil {
		return ctrl.Result{}, fmt.Errorf("delete paused state of sandbox %s: %w", sbx.Name, err)
	}
	gone, err := r.deletePod(ctx, sbx)
	if err != nil || !gone {
		return ctrl.Result{RequeueAfter: 5 * time.Second}, err
	}
	if err := r.tokens.Release(ctx, sbx); err != nil {
		return ctrl.Result{}, fmt.Errorf("release token of sandbox %s: %w", sbx.Name, err)
	}
	r.Scheduler.Forget(types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Name})
	metrics.ForgetSandbox(sbx.UID)
	controllerutil.RemoveFinalizer(sbx, sandlotv1.FinalizerSandboxVM)
	if err := r.Update(ctx, sbx); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("remove finalizer of sandbox %s: %w", sbx.Name, err)
	}
	log.FromContext(ctx).Info("sandbox deleted", "sandboxID", sbx.Status.SandboxID)
	return ctrl.Result{}, nil
}

// deadNodeGrace is how long a NotReady node's pods get before they are
// removed without its kubelet (as the node lifecycle controller evicts).
const deadNodeGrace = 5 * time.Minute

// nodeGone reports that no kubelet will finish a pod's deletion on node:
// the Node is deleted, marked out of service, or NotReady for long.
func (r *Reconciler) nodeGone(ctx context.Context, name string) bool {
	node := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		return apierrors.IsNotFound(err)
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return r.now().Sub(c.LastTransitionTime.Time) > deadNodeGrace
		}
	}
	return false
}

// deleteOwned deletes the object of that name only if this Sandbox owns
// it (a user's object that happens to bear the derived name is left
// alone), guarded by its UID, and only once. It reads the cache: an
// object of ours the cache has not seen yet is owned by the Sandbox and
// goes with it by garbage collection; a stale copy's UID fails the
// precondition (a conflict: not ours to delete).
func (r *Reconciler) deleteOwned(ctx context.Context, sbx *sandlotv1.Sandbox, obj client.Object, name string) error {
	err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(obj, sbx) || obj.GetDeletionTimestamp() != nil {
		return nil
	}
	uid := obj.GetUID()
	if err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

// deletePod deletes the sandbox's pod and reports whether it is gone. A
// pod whose node no longer exists has no kubelet to finish it: it is
// removed at once.
//
// A pod the cache holds is deleted by its UID without a read (its
// deletion's watch events reconcile again); only the cache's "gone" is
// confirmed on the API server, since the cache lags.
func (r *Reconciler) deletePod(ctx context.Context, sbx *sandlotv1.Sandbox) (bool, error) {
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: podNameOf(sbx)}
	pod := &corev1.Pod{}
	err := r.Get(ctx, key, pod)
	if err == nil && metav1.IsControlledBy(pod, sbx) {
		return false, r.deletePodOnce(ctx, pod, true)
	}
	if client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("get pod of sandbox %s: %w", sbx.Name, err)
	}
	err = r.APIReader.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) || (err == nil && !metav1.IsControlledBy(pod, sbx)) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("get pod of sandbox %s: %w", sbx.Name, err)
	}
	return false, r.deletePodOnce(ctx, pod, false)
}

// deletePodOnce deletes pod unless its deletion is under way already
// (again, at once, when its node is gone). byUID guards a cached copy: a
// newer pod of that name is not deleted for it.
func (r *Reconciler) deletePodOnce(ctx context.Context, pod *corev1.Pod, byUID bool) error {
	opts := r.podDeleteOptions(ctx, pod)
	if pod.DeletionTimestamp != nil && len(opts) == 0 {
		return nil
	}
	if byUID {
		uid := pod.UID
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	if err := r.Delete(ctx, pod, opts...); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}

// podDeleteOptions: a pod whose node is gone is removed at once.
func (r *Reconciler) podDeleteOptions(ctx context.Context, pod *corev1.Pod) []client.DeleteOption {
	if pod.Spec.NodeName != "" && r.nodeGone(ctx, pod.Spec.NodeName) {
		return []client.DeleteOption{client.GracePeriodSeconds(0)}
	}
	return nil
}

func (r *Reconciler) milliCPUPerVCPU() int64 {
	if r.MilliCPUPerVCPU <= 0 {
		return 1000
	}
	return r.MilliCPUPerVCPU
}
