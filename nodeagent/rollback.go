package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// RollbackFieldManager owns what a rollback records on a Sandbox's status
// (lastRollbackRequestID, the RolledBack condition). It is not
// FieldManager: an apply drops the fields its manager applied before and
// leaves out now, so VMReady and the rollback fields each need their own.
const RollbackFieldManager = "sandlot-agent-rollback"

// rollbackPoll re-checks a rollback that waits for its sandbox or snapshot.
const rollbackPoll = time.Second

// RollbackReconciler restores a sandbox's VM in place, through its shim's
// control API, from one of the sandbox's own snapshots when spec.rollback
// asks with a request ID not yet done: same sandbox ID, pod and node.
type RollbackReconciler struct {
	client.Client
	// Recorder tells each rollback's outcome; nil records no Events.
	Recorder events.EventRecorder
	Node
	layout *layout
}

func (r *RollbackReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sbx := &sandlotv1.Sandbox{}
	if err := r.Get(ctx, req.NamespacedName, sbx); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	rb := sbx.Spec.Rollback
	if rb == nil || sbx.Status.NodeName != r.Name || rb.RequestID == sbx.Status.LastRollbackRequestID || sbx.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	if c := meta.FindStatusCondition(sbx.Status.Conditions, sandlotv1.ConditionRolledBack); c != nil &&
		c.Reason == sandlotv1.ReasonRollbackRefused && c.ObservedGeneration == sbx.Generation {
		return ctrl.Result{}, nil // refused already; a new request changes the generation
	}
	snap, wait, refusal := r.rollbackSource(ctx, sbx)
	switch {
	case refusal != "":
		return ctrl.Result{}, r.record(ctx, sbx, "", metav1.ConditionFalse, sandlotv1.ReasonRollbackRefused, refusal)
	case wait:
		return ctrl.Result{RequeueAfter: rollbackPoll}, nil
	}
	took, err := r.restore(ctx, sbx, snap)
	if err != nil {
		return ctrl.Result{}, r.record(ctx, sbx, "", metav1.ConditionFalse, sandlotv1.ReasonRollbackFailed, err.Error())
	}
	log.FromContext(ctx).Info("rolled back", "sandbox", sbx.Name, "snapshot", snap.Name, "took", took)
	observeRestore("rollback", took)
	return ctrl.Result{}, r.record(ctx, sbx, rb.RequestID, metav1.ConditionTrue, sandlotv1.ReasonRolledBack,
		fmt.Sprintf("restored in place from snapshot %s in %v (request %s)", snap.Name, took.Round(time.Millisecond), rb.RequestID))
}

// rollbackSource is the snapshot to roll back to, or whether to wait for
// it (or the sandbox), or why the request is refused.
func (r *RollbackReconciler) rollbackSource(ctx context.Context, sbx *sandlotv1.Sandbox) (*sandlotv1.Snapshot, bool, string) {
	name := sbx.Spec.Rollback.Snapshot
	switch sbx.Status.Phase {
	case sandlotv1.SandboxRunning:
	case sandlotv1.SandboxPending, sandlotv1.SandboxStarting, sandlotv1.SandboxResuming:
		return nil, true, ""
	default:
		return nil, false, fmt.Sprintf("the sandbox is %s: only a running sandbox rolls back", sbx.Status.Phase)
	}
	snap := &sandlotv1.Snapshot{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: name}, snap); err != nil {
		return nil, false, fmt.Sprintf("snapshot %s: %v", name, err)
	}
	if snap.Spec.Source.Sandbox != sbx.Name || snap.Status.SandboxID != sbx.Status.SandboxID {
		return nil, false, fmt.Sprintf("snapshot %s was taken of sandbox %q (ID %s), not of this one (ID %s): a rollback restores one of the sandbox's own snapshots",
			name, snap.Spec.Source.Sandbox, snap.Status.SandboxID, sbx.Status.SandboxID)
	}
	switch snap.Status.Phase {
	case sandlotv1.DataReady:
		return snap, false, ""
	case sandlotv1.DataFailed:
		return nil, false, "snapshot " + name + " failed"
	}
	return nil, true, ""
}

// restore opens the snapshot on this node and has the shim restore the
// pod's VM from it.
func (r *RollbackReconciler) restore(ctx context.Context, sbx *sandlotv1.Sandbox, snap *sandlotv1.Snapshot) (time.Duration, error) {
	pod := sbx.Status.PodName
	if pod == "" {
		return 0, fmt.Errorf("sandbox %s has no pod", sbx.Name)
	}
	podObj, err := r.podOf(ctx, sbx.Namespace, pod)
	if err != nil {
		return 0, err
	}
	dir, release, err := r.layout.open(ctx, key(snapshotObject{snap}))
	if reason := refusal(err); reason != "" { // the data is bad: its object says so too
		event(r.Recorder, snap, sbx, true, reason, actionStage, fmt.Sprintf("node %s refused this data for a rollback: %v", r.Name, err))
	}
	if err != nil {
		return 0, fmt.Errorf("open snapshot %s: %w", snap.Name, err)
	}
	defer release()
	c, err := r.dial(ctx, podObj)
	if err != nil {
		return 0, fmt.Errorf("shim of pod %s: %w", pod, err)
	}
	defer c.Close()
	// The request's ID makes a second reconcile of the same request (its
	// status write not in this cache yet) a no-op in the shim instead of
	// a second restore under the client the API already answered (make
	// soak: a 502 right after a rollback).
	resp, err := c.Restore(ctx, &controlapi.RestoreRequest{Dir: dir, RequestId: sbx.Spec.Rollback.RequestID})
	if err != nil {
		return 0, fmt.Errorf("restore in place from %s: %w", snap.Name, err)
	}
	return time.Duration(resp.GetTookNanos()), nil
}

// podOf is a pod's UID (its control socket's directory).
func (r *RollbackReconciler) podOf(ctx context.Context, ns, name string) (string, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		return "", fmt.Errorf("pod %s: %w", name, err)
	}
	return string(pod.UID), nil
}

// record applies the rollback's outcome; requestID is set only when done.
// Each request's outcome is an Event on the Sandbox, once.
func (r *RollbackReconciler) record(ctx context.Context, sbx *sandlotv1.Sandbox, requestID string, status metav1.ConditionStatus, reason, msg string) error {
	st := map[string]any{"conditions": []any{conditionFields(sandlotv1.ConditionRolledBack, status, reason, msg, sbx.Generation)}}
	if requestID != "" {
		st["lastRollbackRequestID"] = requestID
	} else if sbx.Status.LastRollbackRequestID != "" {
		st["lastRollbackRequestID"] = sbx.Status.LastRollbackRequestID // keep what this manager applied before
	}
	if err := applySandboxStatus(ctx, r.Client, sbx.Namespace, sbx.Name, RollbackFieldManager, st); err != nil {
		return fmt.Errorf("record the rollback of sandbox %s: %w", sbx.Name, err)
	}
	// The condition of an earlier request (an older generation) counts as
	// none: a second rollback that succeeds as the first did is news too.
	old := sbx.Status.Conditions
	if c := meta.FindStatusCondition(old, sandlotv1.ConditionRolledBack); c != nil && c.ObservedGeneration != sbx.Generation {
		old = nil
	}
	conditionEvents(r.Recorder, sbx, nil, actionRollback, old,
		metav1.Condition{Type: sandlotv1.ConditionRolledBack, Status: status, Reason: reason, Message: msg}, false)
	return nil
}

// applySandboxStatus server-side-applies fields of a Sandbox's status as
// manager: the controller owns every other field.
func applySandboxStatus(ctx context.Context, c client.Client, ns, name, manager string, status map[string]any) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": sandlotv1.GroupVersion.String(), "kind": "Sandbox",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"status":   status,
	}}
	return c.Status().Patch(ctx, u, client.Apply, client.FieldOwner(manager), client.ForceOwnership)
}

// conditionFields is a condition as an apply configuration.
func conditionFields(typ string, status metav1.ConditionStatus, reason, msg string, gen int64) map[string]any {
	return map[string]any{"type": typ, "status": string(status), "reason": reason, "message": msg,
		"observedGeneration": gen, "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}
}
