package drain

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// SetupWithManager watches placed sandboxes (only what a move decision
// reads: node, phase, paused, the marks) and nodes being cordoned or
// uncordoned (their sandboxes).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("drain").
		For(&sandlotv1.Sandbox{}, builder.WithPredicates(moveInputsChanged())).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesOn), builder.WithPredicates(cordonChanged())).
		Complete(r)
}

func moveInputsChanged() predicate.Funcs {
	placed := func(o client.Object) bool {
		s, ok := o.(*sandlotv1.Sandbox)
		return ok && (s.Status.NodeName != "" || s.Annotations[sandlotv1.AnnotationMoveFrom] != "")
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return placed(e.Object) },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*sandlotv1.Sandbox)
			n, ok2 := e.ObjectNew.(*sandlotv1.Sandbox)
			return ok1 && ok2 && placed(n) && (o.Status.NodeName != n.Status.NodeName || o.Status.Phase != n.Status.Phase ||
				o.Spec.Paused != n.Spec.Paused ||
				o.Annotations[sandlotv1.AnnotationMoveFrom] != n.Annotations[sandlotv1.AnnotationMoveFrom] ||
				o.Annotations[sandlotv1.AnnotationMoveBlocked] != n.Annotations[sandlotv1.AnnotationMoveBlocked])
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func cordonChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			return ok1 && ok2 && o.Spec.Unschedulable != n.Spec.Unschedulable
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// sandboxesOn maps a node to the sandboxes on it or moving off it.
func (r *Reconciler) sandboxesOn(ctx context.Context, o client.Object) []reconcile.Request {
	list := &sandlotv1.SandboxList{}
	if err := r.List(ctx, list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, s := range list.Items {
		if s.Status.NodeName == o.GetName() || s.Annotations[sandlotv1.AnnotationMoveFrom] == o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
	}
	return reqs
}
