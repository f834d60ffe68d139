package sandbox

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/index"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
	"github.com/sandlot-dev/sandlot/controllers/queue"
	"github.com/sandlot-dev/sandlot/controllers/template"
)

// SetupWithManager watches Sandboxes and what they depend on. An
// unplaced sandbox waiting for room other pods hold is retried every
// retryPlacement: a watch of every pod's end, cluster-wide, would list
// the sandboxes at each.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.setupScheduler(mgr); err != nil {
		return err
	}
	r.bases = template.NewBaseMemo()
	r.tokens = &podspec.Tokens{Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder}
	if err := r.bases.Watch(context.Background(), mgr); err != nil {
		return err
	}
	owned := func() handler.EventHandler {
		return handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &sandlotv1.Sandbox{}, handler.OnlyControllerOwner())
	}
	return ctrl.NewControllerManagedBy(mgr).
		Watches(&sandlotv1.Sandbox{}, queue.Ahead(&handler.EnqueueRequestForObject{}, sandboxPlaced)).
		Watches(&corev1.Pod{}, queue.Ahead(owned(), always)).
		Watches(&sandlotv1.PausedSandbox{}, queue.Ahead(owned(), always)).
		Watches(&corev1.Secret{}, owned(), builder.WithPredicates(podspec.TokenSecretEvents())).
		Watches(&sandlotv1.Template{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesUsing(index.SandboxByTemplate)),
			builder.WithPredicates(templateChangedForSandboxes())).
		Watches(&sandlotv1.Snapshot{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesUsing(index.SandboxBySnapshot))).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesForNode),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{},
				placement.NodeReadyChanged()))).
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
func (r *Reconciler) sandboxesUsing(index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &sandlotv1.SandboxList{}
		if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			return nil
		}
		return sandboxRequests(list.Items, func(*sandlotv1.Sandbox) bool { return true })
	}
}

// sandboxesForNode wakes, when a node changes, the sandboxes waiting for
// a node and those on it (a node lost: nodelost.go).
func (r *Reconciler) sandboxesForNode(ctx context.Context, node client.Object) []reconcile.Request {
	list := &sandlotv1.SandboxList{}
	if err := r.List(ctx, list); err != nil {
		return nil
	}
	return sandboxRequests(list.Items, func(s *sandlotv1.Sandbox) bool {
		return (s.Status.NodeName == "" || s.Status.NodeName == node.GetName()) && !s.Status.Phase.Terminal()
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

// setupScheduler makes the Scheduler, or fills in what it leaves unset.
func (r *Reconciler) setupScheduler(mgr ctrl.Manager) error {
	if r.Scheduler == nil {
		r.Scheduler = &placement.Scheduler{}
	}
	s := r.Scheduler
	if s.Sandboxes == nil {
		s.Sandboxes = r.Client
	}
	if s.MilliCPUPerVCPU == 0 {
		s.MilliCPUPerVCPU = r.milliCPUPerVCPU()
	}
	if s.Pods == nil {
		view, err := placement.NewPodUsageView(mgr)
		if err != nil {
			return err
		}
		s.Pods = view
	}
	return nil
}
