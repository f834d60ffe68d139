package placement

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// NodeReadyChanged passes node updates that change readiness, taints or
// allocatable, not the kubelet's periodic heartbeats. (A Node's spec
// changes do not bump its generation.)
func NodeReadyChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return nodeReady(o) != nodeReady(n) || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
			!o.Status.Allocatable.Cpu().Equal(*n.Status.Allocatable.Cpu()) ||
			!o.Status.Allocatable.Memory().Equal(*n.Status.Allocatable.Memory())
	}}
}

func nodeReady(n *corev1.Node) bool {
	return Ineligible(n) == ""
}
