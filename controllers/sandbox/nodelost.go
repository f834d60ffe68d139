package sandbox

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/index"
)

// nodeState is what the controller knows of a sandbox's node: down (its
// VM cannot be reached) and fenced (known not to run it any more).
type nodeState struct {
	down, fenced bool
	why          string
}

// describeNode reads a node (nil: deleted). Only a deleted node or one
// tainted out-of-service (Kubernetes' non-graceful node shutdown: an
// operator says it is off) is fenced: a NotReady node may be cut off
// from the API server while its VMs run on.
func describeNode(name string, node *corev1.Node) nodeState {
	if node == nil {
		return nodeState{down: true, fenced: true, why: "node " + name + " is deleted"}
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return nodeState{down: true, fenced: true, why: "node " + name + " is out of service (" + t.Key + ")"}
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return nodeState{down: true, why: fmt.Sprintf("node %s is not ready since %s (%s)", name,
				c.LastTransitionTime.UTC().Format(time.RFC3339), c.Reason)}
		}
	}
	return nodeState{}
}

// nodeLostAction is what decideNodeLost chose.
type nodeLostAction int

const (
	nodeLostNone    nodeLostAction = iota // the node is up: the pod's own story stands
	nodeLostFail                          // fail with NodeLost
	nodeLostWait                          // Restore, once the node is fenced
	nodeLostRestore                       // restore the snapshot on another node
)

// decideNodeLost: what becomes of a sandbox whose pod went (or is going)
// with its node in state n, by its policy and its newest restorable
// snapshot (nil: none).
func decideNodeLost(policy sandlotv1.NodeLostAction, n nodeState, snap *sandlotv1.Snapshot) (nodeLostAction, string) {
	switch {
	case !n.down:
		return nodeLostNone, ""
	case policy != sandlotv1.NodeLostRestore:
		return nodeLostFail, n.why + ": its VM is lost (spec.onNodeLost: Report)"
	case !n.fenced:
		return nodeLostWait, n.why + ": restoring on another node once the node is deleted or tainted " +
			corev1.TaintNodeOutOfService + " (it may still run the VM)"
	case snap == nil:
		return nodeLostFail, n.why + ": no Snapshot of the sandbox has its data in the shared store (remoteStatus Ready) to restore"
	}
	return nodeLostRestore, n.why + ": restoring snapshot " + snap.Name + " on another node"
}

// newestRestorable is the newest of snaps taken of sandbox id whose data
// another node can restore; nil when none.
func newestRestorable(snaps []sandlotv1.Snapshot, id string) *sandlotv1.Snapshot {
	var best *sandlotv1.Snapshot
	for i := range snaps {
		s := &snaps[i]
		if s.Status.SandboxID != id || s.DeletionTimestamp != nil || s.Status.Phase != sandlotv1.DataReady ||
			s.Status.RemoteStatus != sandlotv1.RemoteReady {
			continue
		}
		if best == nil || best.CreationTimestamp.Before(&s.CreationTimestamp) {
			best = s
		}
	}
	return best
}

// nodeLost handles a sandbox whose pod (nil: vanished) went with its
// node: handled false leaves the pod's own story (PodLost) to the caller.
func (r *Reconciler) nodeLost(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod, nodeName string) (ctrl.Result, bool, error) {
	st := &sbx.Status
	if st.RestoringFrom != "" && pod != nil { // the lost pod, still going: its name is the new one's
		return ctrl.Result{RequeueAfter: time.Second}, true, r.deletePodOnce(ctx, pod, true)
	}
	// Only the pod its VM runs in: a resume's or a claim's pod going is
	// theirs to handle.
	if nodeName == "" || (st.Phase != sandlotv1.SandboxRunning && st.Phase != sandlotv1.SandboxStarting) {
		return ctrl.Result{}, false, nil
	}
	n, err := r.nodeStateOf(ctx, nodeName)
	if err != nil || !n.down {
		return ctrl.Result{}, false, err
	}
	var snap *sandlotv1.Snapshot
	if sbx.Spec.OnNodeLost == sandlotv1.NodeLostRestore && n.fenced {
		if snap, err = r.restorableSnapshot(ctx, sbx); err != nil {
			return ctrl.Result{}, false, err
		}
	}
	action, msg := decideNodeLost(sbx.Spec.OnNodeLost, n, snap)
	switch action {
	case nodeLostFail:
		setFailed(st, sbx.Generation, sandlotv1.ReasonNodeLost, msg)
		return ctrl.Result{}, true, nil
	case nodeLostWait:
		setPending(st, sbx.Generation, sandlotv1.ReasonNodeLost, msg)
		st.PodIP = ""
		return ctrl.Result{RequeueAfter: retryPlacement}, true, nil
	}
	if pod != nil {
		if err := r.deletePodOnce(ctx, pod, true); err != nil { // fenced: at once
			return ctrl.Result{}, false, err
		}
	}
	st.RestoringFrom = snap.Name
	res, err := r.replacePod(ctx, sbx, nil, podView{Reason: sandlotv1.ReasonNodeLost, Message: msg})
	return res, true, err
}

func (r *Reconciler) nodeStateOf(ctx context.Context, name string) (nodeState, error) {
	node := &corev1.Node{}
	err := r.Get(ctx, types.NamespacedName{Name: name}, node)
	if apierrors.IsNotFound(err) {
		if err = r.APIReader.Get(ctx, types.NamespacedName{Name: name}, node); apierrors.IsNotFound(err) {
			return describeNode(name, nil), nil
		}
	}
	if err != nil {
		return nodeState{}, fmt.Errorf("get node %s: %w", name, err)
	}
	return describeNode(name, node), nil
}

// restorableSnapshot is the sandbox's newest snapshot another node can
// restore, or nil.
func (r *Reconciler) restorableSnapshot(ctx context.Context, sbx *sandlotv1.Sandbox) (*sandlotv1.Snapshot, error) {
	list := &sandlotv1.SnapshotList{}
	if err := r.List(ctx, list, client.InNamespace(sbx.Namespace), client.MatchingFields{index.SnapshotBySandbox: sbx.Name}); err != nil {
		return nil, fmt.Errorf("list snapshots of sandbox %s: %w", sbx.Name, err)
	}
	return newestRestorable(list.Items, sbx.Status.SandboxID), nil
}
