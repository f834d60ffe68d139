package data

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/index"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// SnapshotReconciler labels a Snapshot with the node whose agent must take
// it and holds its deletion while any Sandbox restores from it. The agent
// does the work and owns the data finalizer.
type SnapshotReconciler struct {
	client.Client
	// Recorder emits an Event per status transition (nil: none).
	Recorder events.EventRecorder
	// APIReader confirms a Sandbox is really gone before a Snapshot of it
	// fails (a cache lags).
	APIReader client.Reader
	// DefaultExpiry deletes a Snapshot that sets no expiry of its own that
	// long after its creation (0: never).
	DefaultExpiry time.Duration
}

// +kubebuilder:rbac:groups=sandlot.dev,resources=snapshots,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=snapshots/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=snapshots/finalizers,verbs=update

func (r *SnapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	snap := &sandlotv1.Snapshot{}
	if err := r.Get(ctx, req.NamespacedName, snap); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if snap.DeletionTimestamp != nil {
		if err := r.release(ctx, snap); err != nil {
			return ctrl.Result{}, err
		}
		after, err := handOffIfNodeGone(ctx, r.Client, r.Recorder, snap, &snap.Status.DataStatus)
		return ctrl.Result{RequeueAfter: after}, err
	}
	orig := snap.DeepCopy()
	if snap.Status.NodeName == "" {
		a, err := r.assignment(ctx, snap)
		if err != nil {
			return ctrl.Result{}, err
		}
		applyAssignment(&snap.Status, snap.Generation, a)
	}
	snap.Status.ObservedGeneration = snap.Generation
	snap.Status.ExpiresAt = expiresAt(snap.CreationTimestamp, snap.Spec.ExpireAfterSeconds, r.DefaultExpiry)
	if err := writes.PatchStatus(ctx, r.Client, r.Recorder, orig, snap); err != nil {
		return ctrl.Result{}, err
	}
	// The metadata last, on a copy, in one write: the agent's cache
	// selects by the node label, and by then the status says what to do.
	if err := r.claimMetadata(ctx, snap.DeepCopy(), snap.Status.NodeName); err != nil {
		return ctrl.Result{}, err
	}
	left, err := deleteIfExpired(ctx, r.Client, snap, snap.Status.ExpiresAt, time.Now())
	return ctrl.Result{RequeueAfter: left}, err
}

// snapshotAssignment is who must take a snapshot, or why nobody can yet.
type snapshotAssignment struct {
	Node      string
	Phase     sandlotv1.DataPhase
	Reason    string
	Message   string
	SandboxID string
	Template  string
	VM        sandlotv1.VMSpec
	DependsOn *sandlotv1.DataRef
}

func (r *SnapshotReconciler) assignment(ctx context.Context, snap *sandlotv1.Snapshot) (snapshotAssignment, error) {
	if imp := snap.Spec.Source.Import; imp != nil {
		return r.importAssignment(ctx, imp)
	}
	sbx := &sandlotv1.Sandbox{}
	key := types.NamespacedName{Namespace: snap.Namespace, Name: snap.Spec.Source.Sandbox}
	err := r.Get(ctx, key, sbx)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, key, sbx)
	}
	if apierrors.IsNotFound(err) {
		return snapshotAssignment{Phase: sandlotv1.DataFailed, Reason: sandlotv1.ReasonSourceNotFound,
			Message: fmt.Sprintf("sandbox %q not found", snap.Spec.Source.Sandbox)}, nil
	}
	if err != nil {
		return snapshotAssignment{}, fmt.Errorf("get sandbox of snapshot %s: %w", snap.Name, err)
	}
	pod := &corev1.Pod{}
	if sbx.Status.Phase == sandlotv1.SandboxRunning {
		err = r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Status.PodName}, pod)
		if client.IgnoreNotFound(err) != nil {
			return snapshotAssignment{}, fmt.Errorf("get pod of sandbox %s: %w", sbx.Name, err)
		}
	}
	tpl := sbx.Spec.Source.Template
	if tpl == "" {
		src := &sandlotv1.Snapshot{}
		if r.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: sbx.Spec.Source.Snapshot}, src) == nil {
			tpl = src.Status.Template
		}
	}
	return sandboxAssignment(sbx, pod, err == nil, tpl), nil
}

// sandboxAssignment: a running sandbox is snapshotted on its node; a
// sandbox that has ended never will be; any other waits.
func sandboxAssignment(sbx *sandlotv1.Sandbox, pod *corev1.Pod, havePod bool, template string) snapshotAssignment {
	switch {
	case sbx.DeletionTimestamp != nil || sbx.Status.Phase.Terminal():
		return snapshotAssignment{Phase: sandlotv1.DataFailed, Reason: sandlotv1.ReasonSourceFailed,
			Message: fmt.Sprintf("sandbox %q has ended (phase %s)", sbx.Name, sbx.Status.Phase)}
	case sbx.Status.Phase != sandlotv1.SandboxRunning || sbx.Status.NodeName == "" || !havePod:
		return snapshotAssignment{Phase: sandlotv1.DataPending, Reason: sandlotv1.ReasonSandboxNotRunning,
			Message: fmt.Sprintf("waiting for sandbox %q to run (phase %s)", sbx.Name, sbx.Status.Phase)}
	}
	return snapshotAssignment{
		Node: sbx.Status.NodeName, Phase: sandlotv1.DataPending, Reason: sandlotv1.ReasonNodeAssigned,
		Message:   "the node agent on " + sbx.Status.NodeName + " takes this snapshot",
		SandboxID: sbx.Status.SandboxID, Template: template, VM: VMSpecOfPod(pod, sbx.Status.Resources),
		DependsOn: RestoredFrom(sbx, pod),
	}
}

// importAssignment gives imported data to the named node, or to the first
// eligible runtime node.
func (r *SnapshotReconciler) importAssignment(ctx context.Context, imp *sandlotv1.SnapshotImport) (snapshotAssignment, error) {
	assigned := func(node string) snapshotAssignment {
		return snapshotAssignment{Node: node, Phase: sandlotv1.DataPending, Reason: sandlotv1.ReasonNodeAssigned,
			Message: "the node agent on " + node + " verifies the imported data"}
	}
	if imp.NodeName != "" {
		return assigned(imp.NodeName), nil
	}
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}); err != nil {
		return snapshotAssignment{}, fmt.Errorf("list nodes: %w", err)
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	for i := range nodes.Items {
		if placement.Ineligible(&nodes.Items[i]) == "" {
			return assigned(nodes.Items[i].Name), nil
		}
	}
	return snapshotAssignment{Phase: sandlotv1.DataPending, Reason: sandlotv1.ReasonNoEligibleNode,
		Message: "no ready node labelled " + sandlotv1.LabelRuntime + "=true to verify the imported data"}, nil
}

func applyAssignment(st *sandlotv1.SnapshotStatus, gen int64, a snapshotAssignment) {
	st.Phase, st.NodeName = a.Phase, a.Node
	st.SandboxID, st.Template, st.VM, st.DependsOn = a.SandboxID, a.Template, a.VM, a.DependsOn
	scheduled := metav1.ConditionFalse
	if a.Node != "" {
		scheduled = metav1.ConditionTrue
	}
	writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionScheduled, scheduled, a.Reason, a.Message)
	if a.Phase == sandlotv1.DataFailed {
		writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionReady, metav1.ConditionFalse, a.Reason, a.Message)
	}
}

// VMSpecOfPod is what runs in a sandbox pod, as a restore needs it.
func VMSpecOfPod(pod *corev1.Pod, res *sandlotv1.Resources) sandlotv1.VMSpec {
	vm := sandlotv1.VMSpec{}
	if len(pod.Spec.Containers) > 0 {
		vm.Image = pod.Spec.Containers[0].Image
	}
	if res != nil {
		vm.Resources = *res
	}
	if a, err := sandlotv1.DecodeVMAnnotations(pod.Annotations); err == nil {
		vm.WritableLayerMiB = a.WritableLayerMiB // through the codec the pod was written with
		vm.VolumeMounts = a.Mounts()
	}
	return vm
}

// claimMetadata adds the snapshot's finalizer and its node label in one
// patch (nothing when they are there). The agent adds its own data
// finalizer when it takes the snapshot: a snapshot no agent ever took can
// be deleted without one.
func (r *SnapshotReconciler) claimMetadata(ctx context.Context, snap *sandlotv1.Snapshot, node string) error {
	patch := client.MergeFromWithOptions(snap.DeepCopy(), client.MergeFromWithOptimisticLock{})
	changed := controllerutil.AddFinalizer(snap, sandlotv1.FinalizerInUse)
	if node != "" && snap.Labels[sandlotv1.LabelNode] != node {
		if snap.Labels == nil {
			snap.Labels = map[string]string{}
		}
		snap.Labels[sandlotv1.LabelNode], changed = node, true
	}
	if !changed {
		return nil
	}
	if err := r.Patch(ctx, snap, patch); err != nil {
		return fmt.Errorf("finalizers and node label of snapshot %s: %w", snap.Name, err)
	}
	return nil
}

// release lets a deleted Snapshot go once no Sandbox restores from it; the
// agent's data finalizer then removes the data.
func (r *SnapshotReconciler) release(ctx context.Context, snap *sandlotv1.Snapshot) error {
	if !controllerutil.ContainsFinalizer(snap, sandlotv1.FinalizerInUse) {
		return nil
	}
	names, err := r.dependents(ctx, snap)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return holdDeletion(ctx, r.Client, r.Recorder, snap, &snap.Status.Conditions, "restores from or builds on it", names)
	}
	controllerutil.RemoveFinalizer(snap, sandlotv1.FinalizerInUse)
	if err := r.Update(ctx, snap); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer of snapshot %s: %w", snap.Name, err)
	}
	return nil
}

// SetupWithManager watches Snapshots, the Sandboxes they depend on, and
// the Snapshots and PausedSandboxes that build on them.
func (r *SnapshotReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandlotv1.Snapshot{}).
		Watches(&sandlotv1.Sandbox{}, handler.EnqueueRequestsFromMapFunc(r.snapshotsOf)).
		Watches(&sandlotv1.Snapshot{}, handler.EnqueueRequestsFromMapFunc(snapshotsDependedOn)).
		Watches(&sandlotv1.PausedSandbox{}, handler.EnqueueRequestsFromMapFunc(snapshotsDependedOn)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(dataOnNode(r.Client, func() client.ObjectList { return &sandlotv1.SnapshotList{} })),
			builder.WithPredicates(nodeDeleted())).
		Named("snapshot").
		Complete(r)
}

// snapshotsOf maps a Sandbox to the Snapshots taken from it (waiting for
// it to run) and the ones it restores from (held while it exists): its
// source, or its template's base snapshot.
func (r *SnapshotReconciler) snapshotsOf(ctx context.Context, o client.Object) []reconcile.Request {
	sbx := o.(*sandlotv1.Sandbox)
	var reqs []reconcile.Request
	for _, s := range append(index.NonEmpty(sbx.Spec.Source.Snapshot), index.NonEmpty(sbx.Status.BaseSnapshot)...) {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sbx.Namespace, Name: s}})
	}
	list := &sandlotv1.SnapshotList{}
	if err := r.List(ctx, list, client.InNamespace(sbx.Namespace), client.MatchingFields{index.SnapshotBySandbox: sbx.Name}); err != nil {
		return reqs
	}
	for _, s := range list.Items {
		if s.Status.NodeName == "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
	}
	return reqs
}
