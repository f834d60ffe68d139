package data

// Data whose node is gone: a deleted Snapshot or PausedSandbox waits for
// its node's agent to remove its data (the data finalizer). When the Node
// object itself is deleted no agent will: the deletion is handed to
// another node's agent when a remote copy exists (it deletes that copy),
// else the data is marked Lost and let go — it went with its node.

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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// handOffIfNodeGone takes over a deleted object's data deletion when its
// node is deleted; requeue is non-zero while no other node can take it.
func handOffIfNodeGone(ctx context.Context, c client.Client, rec events.EventRecorder, obj client.Object,
	st *sandlotv1.DataStatus) (time.Duration, error) {
	if obj.GetDeletionTimestamp() == nil || st.NodeName == "" || controllerutil.ContainsFinalizer(obj, sandlotv1.FinalizerInUse) ||
		!controllerutil.ContainsFinalizer(obj, sandlotv1.FinalizerData) {
		return 0, nil
	}
	err := c.Get(ctx, types.NamespacedName{Name: st.NodeName}, &corev1.Node{})
	if !apierrors.IsNotFound(err) {
		return 0, client.IgnoreNotFound(err) // its agent deletes the data
	}
	orig := obj.DeepCopyObject().(client.Object)
	gone := st.NodeName
	if st.RemoteStatus != sandlotv1.RemoteReady {
		st.Phase = sandlotv1.DataLost
		writes.SetCondition(&st.Conditions, obj.GetGeneration(), sandlotv1.ConditionReady, metav1.ConditionFalse, sandlotv1.ReasonDataLost,
			"node "+gone+" is gone and no remote copy existed: the data went with it")
		if err := writes.PatchStatus(ctx, c, rec, orig, obj); err != nil {
			return 0, err
		}
		controllerutil.RemoveFinalizer(obj, sandlotv1.FinalizerData)
		return 0, client.IgnoreNotFound(c.Update(ctx, obj))
	}
	heir, err := heirNode(ctx, c)
	if err != nil || heir == "" {
		return 30 * time.Second, err
	}
	st.NodeName = heir
	writes.SetCondition(&st.Conditions, obj.GetGeneration(), sandlotv1.ConditionScheduled, metav1.ConditionTrue, sandlotv1.ReasonDataHandedOff,
		"node "+gone+" is gone: the node agent on "+heir+" deletes the remote copy")
	if err := writes.PatchStatus(ctx, c, rec, orig, obj); err != nil {
		return 0, err
	}
	labelled := obj.DeepCopyObject().(client.Object)
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	labels := labelled.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[sandlotv1.LabelNode] = heir
	labelled.SetLabels(labels)
	if err := c.Patch(ctx, labelled, patch); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("hand %s to node %s: %w", obj.GetName(), heir, err)
	}
	return 0, nil
}

// heirNode is the first eligible runtime node by name ("" when none).
func heirNode(ctx context.Context, c client.Client) (string, error) {
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}); err != nil {
		return "", fmt.Errorf("list nodes: %w", err)
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	for i := range nodes.Items {
		if nodes.Items[i].DeletionTimestamp == nil && placement.Ineligible(&nodes.Items[i]) == "" {
			return nodes.Items[i].Name, nil
		}
	}
	return "", nil
}

// dataOnNode maps a Node to the objects of list's kind labelled with it,
// so a deleted Node wakes the deletions it strands.
func dataOnNode(c client.Client, newList func() client.ObjectList) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newList()
		if err := c.List(ctx, list, client.MatchingLabels{sandlotv1.LabelNode: o.GetName()}); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		switch l := list.(type) {
		case *sandlotv1.SnapshotList:
			for _, s := range l.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
			}
		case *sandlotv1.PausedSandboxList:
			for _, p := range l.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
			}
		}
		return reqs
	}
}

// nodeDeleted passes only Node deletions.
func nodeDeleted() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
	}
}
