package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/shim/controlapi"
	"github.com/sandlot-dev/sandlot/vm"
)

// SnapshotReconciler takes the Snapshots the controller assigned to this
// node: the shim's Snapshot into the store, then the data's remote status
// until it is final. It owns the data finalizer.
type SnapshotReconciler struct {
	client.Client
	Node
}

// Node is what the agent knows of its node.
type Node struct {
	Name string
	// SandlotRoot is the shims' <root>: <root>/pods/<podUID>/control.sock.
	SandlotRoot string
	Store       store.Store
}

// remotePoll is how often a snapshot's remote status is read until final.
const remotePoll = time.Second

func (r *SnapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	snap := &sandlotv1.Snapshot{}
	if err := r.Get(ctx, req.NamespacedName, snap); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if snap.Status.NodeName != r.Name {
		return ctrl.Result{}, nil
	}
	if snap.DeletionTimestamp != nil {
		return r.deleteData(ctx, snap)
	}
	if controllerutil.AddFinalizer(snap, sandlotv1.FinalizerData) {
		if err := r.Update(ctx, snap); err != nil {
			return ctrl.Result{}, fmt.Errorf("add data finalizer to %s: %w", req, err)
		}
	}
	orig := snap.DeepCopy()
	res, err := r.phase(ctx, snap)
	snap.Status.ObservedGeneration = snap.Generation
	if perr := r.Status().Patch(ctx, snap, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); perr != nil {
		return ctrl.Result{}, errors.Join(err, fmt.Errorf("status of snapshot %s: %w", req, perr))
	}
	return res, err
}

// phase moves the snapshot one step: take it, recover from an agent that
// died while taking it, or follow its remote status.
func (r *SnapshotReconciler) phase(ctx context.Context, snap *sandlotv1.Snapshot) (ctrl.Result, error) {
	st := &snap.Status
	switch st.Phase {
	case sandlotv1.DataPending:
		if snap.Spec.Source.Sandbox == "" {
			return ctrl.Result{}, nil // imports are the controller's
		}
		return ctrl.Result{}, r.take(ctx, snap)
	case sandlotv1.DataCreating:
		// Creating at the start of a reconcile: an agent died mid-snapshot.
		// Committed data is finished; anything else is never Ready.
		if _, err := r.Store.Status(ctx, key(snap)); err == nil {
			return ctrl.Result{RequeueAfter: remotePoll}, r.finish(ctx, snap)
		}
		_ = os.RemoveAll(r.Store.Dir(key(snap)))
		setFailed(st, snap.Generation, "AgentRestarted", "the node agent restarted while taking the snapshot; its partial data was removed")
		return ctrl.Result{}, nil
	case sandlotv1.DataReady:
		return r.followRemote(ctx, snap)
	}
	return ctrl.Result{}, nil
}

func key(snap *sandlotv1.Snapshot) string { return "snapshots/" + string(snap.UID) }

// take asks the sandbox's shim for the snapshot, straight into the store.
func (r *SnapshotReconciler) take(ctx context.Context, snap *sandlotv1.Snapshot) error {
	st := &snap.Status
	pod, err := r.sandboxPod(ctx, snap)
	if err != nil {
		setFailed(st, snap.Generation, "SandboxNotRunning", err.Error())
		return nil
	}
	// Record Creating first (its own write): a restarted agent must know
	// a snapshot was under way.
	orig := snap.DeepCopy()
	st.Phase = sandlotv1.DataCreating
	if err := r.Status().Patch(ctx, snap, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	dir := r.Store.Dir(key(snap))
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	c, err := controlapi.Dial(ctx, filepath.Join(r.SandlotRoot, "pods", string(pod.UID), "control.sock"))
	if err != nil {
		setFailed(st, snap.Generation, "ShimUnreachable", err.Error())
		return nil
	}
	defer c.Close()
	resp, err := c.Snapshot(ctx, &controlapi.SnapshotRequest{Dir: dir})
	if err != nil {
		setFailed(st, snap.Generation, "SnapshotFailed", err.Error())
		return nil
	}
	log.FromContext(ctx).Info("snapshot taken", "snapshot", snap.Name, "paused", time.Duration(resp.GetPausedNanos()),
		"took", time.Duration(resp.GetTookNanos()))
	if _, err := r.Store.Commit(ctx, key(snap)); err != nil {
		setFailed(st, snap.Generation, "StoreFailed", err.Error())
		return nil
	}
	return r.finish(ctx, snap)
}

// sandboxPod is the running pod of the snapshot's sandbox, on this node.
func (r *SnapshotReconciler) sandboxPod(ctx context.Context, snap *sandlotv1.Snapshot) (*corev1.Pod, error) {
	sbx := &sandlotv1.Sandbox{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: snap.Namespace, Name: snap.Spec.Source.Sandbox}, sbx); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", snap.Spec.Source.Sandbox, err)
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: snap.Namespace, Name: sbx.Status.PodName}, pod); err != nil {
		return nil, fmt.Errorf("pod of sandbox %s: %w", sbx.Name, err)
	}
	if pod.Spec.NodeName != r.Name || pod.Status.Phase != corev1.PodRunning {
		return nil, fmt.Errorf("sandbox %s is not running on %s", sbx.Name, r.Name)
	}
	return pod, nil
}

// applyManifest records what the snapshot holds. Location is the data's
// directory on this node (the local store's restore path).
func applyManifest(st *sandlotv1.SnapshotStatus, m *vm.Manifest, dir string) {
	st.Location = dir
	st.TotalBytes = m.TotalBytes(dir)
	st.DirtyBytes = m.DirtyBytes
	st.BaseDiskSHA256 = m.BaseDisk.SHA256
	st.Fingerprint = sandlotv1.Fingerprint{CPU: m.CPU, Kernel: m.Kernel, QEMU: m.QEMUVersion, Accel: m.Accel}
	if st.CompletionTime == nil {
		t := metav1.NewTime(m.Created)
		st.CompletionTime = &t
	}
}

// finish marks committed data Ready on this node: what its manifest says
// and its remote status. (Also the path of an agent that restarted after
// the commit but before the status write.)
func (r *SnapshotReconciler) finish(ctx context.Context, snap *sandlotv1.Snapshot) error {
	st := &snap.Status
	rs, err := r.Store.Status(ctx, key(snap))
	if err != nil {
		return err
	}
	dir := r.Store.Dir(key(snap))
	m, err := vm.ReadManifest(dir)
	if err != nil {
		return fmt.Errorf("manifest of snapshot %s: %w", snap.Name, err)
	}
	applyManifest(st, m, dir)
	st.Phase, st.RemoteStatus = sandlotv1.DataReady, rs.Remote
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sandlotv1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: "Persisted", Message: "snapshot persisted on " + r.Name, ObservedGeneration: snap.Generation})
	return nil
}

// followRemote reads the remote status until it is final.
func (r *SnapshotReconciler) followRemote(ctx context.Context, snap *sandlotv1.Snapshot) (ctrl.Result, error) {
	st := &snap.Status
	if st.RemoteStatus == sandlotv1.RemoteReady || st.RemoteStatus == sandlotv1.RemoteFailed || st.RemoteStatus == sandlotv1.RemoteNotApplicable {
		return ctrl.Result{}, nil
	}
	rs, err := r.Store.Status(ctx, key(snap))
	if err != nil {
		return ctrl.Result{}, err
	}
	st.RemoteStatus = rs.Remote
	if rs.Remote == sandlotv1.RemoteReady {
		t := metav1.NewTime(rs.ReadyTime)
		st.RemoteReadyTime = &t
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: remotePoll}, nil
}

// deleteData removes the data once the controller let the Snapshot go
// (it holds deletion while a Sandbox restores from it).
func (r *SnapshotReconciler) deleteData(ctx context.Context, snap *sandlotv1.Snapshot) (ctrl.Result, error) {
	if controllerutil.ContainsFinalizer(snap, sandlotv1.FinalizerInUse) || !controllerutil.ContainsFinalizer(snap, sandlotv1.FinalizerData) {
		return ctrl.Result{}, nil
	}
	err := r.Store.Delete(ctx, key(snap))
	switch {
	case errors.Is(err, store.ErrInUse):
		return ctrl.Result{RequeueAfter: remotePoll}, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return ctrl.Result{}, fmt.Errorf("delete data of snapshot %s: %w", snap.Name, err)
	}
	controllerutil.RemoveFinalizer(snap, sandlotv1.FinalizerData)
	if err := r.Update(ctx, snap); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

func setFailed(st *sandlotv1.SnapshotStatus, gen int64, reason, msg string) {
	st.Phase = sandlotv1.DataFailed
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sandlotv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: reason, Message: msg, ObservedGeneration: gen})
}
