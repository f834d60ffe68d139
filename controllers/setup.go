package controllers

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Field indexes the reconcilers look things up by.
const (
	indexSandboxBySnapshot = "spec.source.snapshot"
	indexSandboxByTemplate = "spec.source.template"
	indexSnapshotBySandbox = "spec.source.sandbox"
	// indexPodByPool: a warm pool pod's template and node ("tpl/node"):
	// a label selector on the cache reads every pod of the namespace.
	indexPodByPool = "metadata.labels.pool-node"
	// indexPodByClaim: a warm pool pod's template and claimant
	// ("tpl/sandbox", "tpl/" while free): a start's claim reads only
	// its template's pool, not every pod of the namespace.
	indexPodByClaim = "metadata.labels.pool-sandbox"
	// indexSnapshotByTemplate: the Template that controls a Snapshot (its
	// base snapshots and build checkpoints).
	indexSnapshotByTemplate = "metadata.ownerReferences.template"
)

// CacheOptions keeps the controller's caches to sandlot's own pods and
// secrets: it never needs the rest of a cluster's. Cached objects drop
// their managedFields, which the controller never reads (an update sent
// without them keeps the stored ones).
func CacheOptions() cache.Options {
	owned, _ := labels.NewRequirement(sandlotv1.LabelSandbox, selection.Exists, nil)
	sel := labels.NewSelector().Add(*owned)
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:    {Label: sel},
		&corev1.Secret{}: {Label: sel},
	}}
}

// Options tune the reconcilers.
type Options struct {
	// SandboxWorkers is how many Sandboxes are reconciled concurrently.
	SandboxWorkers int
	// MilliCPUPerVCPU is the CPU a sandbox pod requests per vCPU (0: 1000).
	MilliCPUPerVCPU int64
	// SnapshotExpiry and PausedExpiry delete Snapshots (that set no expiry
	// of their own) and pause packages that long after their creation
	// (0: never).
	SnapshotExpiry, PausedExpiry time.Duration
	// SlotsPerNode is each template's start slots per node unless its
	// spec.slots says (0: none).
	SlotsPerNode int
	// ImagePullPolicy of every sandlot pod ("": IfNotPresent): Always
	// checks the pod's pull Secrets with the registry at each start,
	// Never runs only images the operator imported.
	ImagePullPolicy corev1.PullPolicy
}

// DefaultSandboxWorkers: sandbox reconciles mostly wait on the API
// server, so several run at once; placement itself is serialised. At
// fleet size (bench-scale, 3,000 over 300 nodes) 8 workers sustained 19
// creates/s, 32 sustained 27/s, 64 no more (the API server saturated).
const DefaultSandboxWorkers = 32

// SetupAll registers every reconciler and index with the manager.
func SetupAll(mgr ctrl.Manager, opts Options) error {
	if err := setupIndexes(context.Background(), mgr); err != nil {
		return err
	}
	if opts.SandboxWorkers <= 0 {
		opts.SandboxWorkers = DefaultSandboxWorkers
	}
	if opts.MilliCPUPerVCPU <= 0 {
		opts.MilliCPUPerVCPU = 1000
	}
	c, r, rec := mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(EventSource)
	var cache client.Reader = c
	state.reader.Store(&cache)
	holds := &roomHolds{}
	if err := (&SandboxReconciler{Client: c, Recorder: rec, APIReader: r, Workers: opts.SandboxWorkers, MilliCPUPerVCPU: opts.MilliCPUPerVCPU,
		PausedExpiry: opts.PausedExpiry, Holds: holds, ImagePullPolicy: opts.ImagePullPolicy}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&TemplateReconciler{Client: c, Recorder: rec, MilliCPUPerVCPU: opts.MilliCPUPerVCPU, SlotsPerNode: opts.SlotsPerNode,
		Holds: holds, ImagePullPolicy: opts.ImagePullPolicy}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&SnapshotReconciler{Client: c, Recorder: rec, APIReader: r, DefaultExpiry: opts.SnapshotExpiry}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&PausedSandboxReconciler{Client: c, Recorder: rec, APIReader: r}).SetupWithManager(mgr)
}

func setupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &sandlotv1.Sandbox{}, indexSandboxBySnapshot, func(o client.Object) []string {
		// A Sandbox restores from its source snapshot, or from its
		// template's base snapshot.
		sbx := o.(*sandlotv1.Sandbox)
		return append(nonEmpty(sbx.Spec.Source.Snapshot), nonEmpty(sbx.Status.BaseSnapshot)...)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &sandlotv1.Sandbox{}, indexSandboxByTemplate, func(o client.Object) []string {
		return nonEmpty(o.(*sandlotv1.Sandbox).Spec.Source.Template)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &sandlotv1.Snapshot{}, indexSnapshotByDependsOn, func(o client.Object) []string {
		return dependsOnKey(o.(*sandlotv1.Snapshot).Status.DependsOn)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &sandlotv1.PausedSandbox{}, indexPausedByDependsOn, func(o client.Object) []string {
		return dependsOnKey(o.(*sandlotv1.PausedSandbox).Spec.DependsOn)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &sandlotv1.Snapshot{}, indexSnapshotByTemplate, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "Template" {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodByPool, poolPodsBy(sandlotv1.LabelNode)); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodByClaim, poolPodsBy(sandlotv1.LabelSandbox)); err != nil {
		return err
	}
	return idx.IndexField(ctx, &sandlotv1.Snapshot{}, indexSnapshotBySandbox, func(o client.Object) []string {
		return nonEmpty(o.(*sandlotv1.Snapshot).Spec.Source.Sandbox)
	})
}

func poolKey(tpl, node string) string { return tpl + "/" + node }

// poolPodsBy indexes warm pool pods by their template and the value of
// label ("tpl/<value>").
func poolPodsBy(label string) client.IndexerFunc {
	return func(o client.Object) []string {
		if tpl := o.GetLabels()[sandlotv1.LabelPool]; tpl != "" {
			return []string{poolKey(tpl, o.GetLabels()[label])}
		}
		return nil
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// SetupWithManager watches Sandboxes and what they depend on. An
// unplaced sandbox waiting for room other pods hold is retried every
// retryPlacement: a watch of every pod's end, cluster-wide, would list
// the sandboxes at each.
func (r *SandboxReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.PodUsage == nil {
		view, err := newPodUsageView(mgr)
		if err != nil {
			return err
		}
		r.PodUsage = view
	}
	r.bases = newBaseMemo()
	if err := r.bases.watch(context.Background(), mgr); err != nil {
		return err
	}
	owned := func() handler.EventHandler {
		return handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &sandlotv1.Sandbox{}, handler.OnlyControllerOwner())
	}
	return ctrl.NewControllerManagedBy(mgr).
		Watches(&sandlotv1.Sandbox{}, ahead(&handler.EnqueueRequestForObject{}, sandboxPlaced)).
		Watches(&corev1.Pod{}, ahead(owned(), always)).
		Watches(&sandlotv1.PausedSandbox{}, ahead(owned(), always)).
		Watches(&sandlotv1.Template{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesUsing(indexSandboxByTemplate)),
			builder.WithPredicates(templateChangedForSandboxes())).
		Watches(&sandlotv1.Snapshot{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesUsing(indexSandboxBySnapshot))).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.unplacedSandboxes),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{},
				nodeReadyChanged()))).
		Named("sandbox").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Complete(r)
}

// templateChangedForSandboxes passes a Template's changes its sandboxes
// act on — its spec, its acceptance, which base snapshots are Ready —
// and not the rest of its status (pools, messages), which at fleet size
// would wake every sandbox of the template at each pool change.
func templateChangedForSandboxes() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*sandlotv1.Template)
		n, ok2 := e.ObjectNew.(*sandlotv1.Template)
		if !ok1 || !ok2 || o.Generation != n.Generation || o.Status.BaseRevision != n.Status.BaseRevision {
			return true
		}
		// Accepted, of which generation (a sandbox waits for its template's
		// current spec to be accepted), and the bases' summary a waiting
		// sandbox shows (by its reason).
		cond := func(t *sandlotv1.Template, typ string) metav1.Condition {
			if c := meta.FindStatusCondition(t.Status.Conditions, typ); c != nil {
				return metav1.Condition{Status: c.Status, Reason: c.Reason, ObservedGeneration: c.ObservedGeneration}
			}
			return metav1.Condition{}
		}
		return cond(o, sandlotv1.ConditionAccepted) != cond(n, sandlotv1.ConditionAccepted) ||
			cond(o, sandlotv1.ConditionBaseSnapshotReady) != cond(n, sandlotv1.ConditionBaseSnapshotReady) ||
			!slices.Equal(readyBases(o), readyBases(n))
	}}
}

// readyBases are a template's Ready base snapshots, in status order.
func readyBases(t *sandlotv1.Template) []string {
	var out []string
	for _, b := range t.Status.BaseSnapshots {
		if b.Phase == sandlotv1.BaseReady {
			out = append(out, b.Node+"/"+b.Revision+"/"+b.Snapshot+"/"+string(b.RemoteStatus))
		}
	}
	return out
}

// sandboxesUsing maps a Template or Snapshot to the Sandboxes started
// from it.
func (r *SandboxReconciler) sandboxesUsing(index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &sandlotv1.SandboxList{}
		if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			return nil
		}
		return sandboxRequests(list.Items, func(*sandlotv1.Sandbox) bool { return true })
	}
}

// unplacedSandboxes wakes the sandboxes waiting for a node when nodes change.
func (r *SandboxReconciler) unplacedSandboxes(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &sandlotv1.SandboxList{}
	if err := r.List(ctx, list); err != nil {
		return nil
	}
	return sandboxRequests(list.Items, func(s *sandlotv1.Sandbox) bool {
		return s.Status.NodeName == "" && !s.Status.Phase.Terminal()
	})
}

func sandboxRequests(items []sandlotv1.Sandbox, keep func(*sandlotv1.Sandbox) bool) []reconcile.Request {
	var reqs []reconcile.Request
	for i := range items {
		if keep(&items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{
				Namespace: items[i].Namespace, Name: items[i].Name}})
		}
	}
	return reqs
}

// nodeReadyChanged passes node updates that change readiness, taints or
// allocatable, not the kubelet's periodic heartbeats. (A Node's spec
// changes do not bump its generation.)
func nodeReadyChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return nodeReady(o) != nodeReady(n) || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
			!o.Status.Allocatable.Cpu().Equal(*n.Status.Allocatable.Cpu()) ||
			!o.Status.Allocatable.Memory().Equal(*n.Status.Allocatable.Memory())
	}}
}

func nodeReady(n *corev1.Node) bool {
	return ineligible(n) == ""
}
