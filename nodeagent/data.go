package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	"github.com/sandlot-dev/sandlot/api/sealed"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// DataReconciler makes the data the controller assigned to this node —
// Snapshots, and the pause packages of PausedSandboxes — from a running
// sandbox: the shim's Snapshot straight into the store, then the data's
// remote status until it is final. It owns the data finalizer.
type DataReconciler struct {
	client.Client
	// Reader reads past the cache a sandbox the cache does not hold, one
	// its status does not place on this node (nil: the cache only).
	Reader client.Reader
	Node
	layout *layout
	// Recorder tells each object's story (ready, failed, remote status);
	// nil records no Events.
	Recorder events.EventRecorder
	// New makes an empty object of the kind reconciled.
	New func() dataObject
}

// dataObject is a Snapshot or a PausedSandbox.
type dataObject interface {
	client.Object
	Data() *sandlotv1.DataStatus
	// Source is the sandbox the data is taken from ("" for an import).
	Source() string
	// Kind is the API kind (the store key's space, stageapi.Key).
	Kind() string
	// Obj is the API object itself (what the client and scheme know).
	Obj() client.Object
}

type snapshotObject struct{ *sandlotv1.Snapshot }

func (o snapshotObject) Data() *sandlotv1.DataStatus { return &o.Status.DataStatus }
func (o snapshotObject) Source() string              { return o.Spec.Source.Sandbox }
func (o snapshotObject) Kind() string                { return "Snapshot" }
func (o snapshotObject) Obj() client.Object          { return o.Snapshot }

type pausedObject struct{ *sandlotv1.PausedSandbox }

func (o pausedObject) Data() *sandlotv1.DataStatus { return &o.Status.DataStatus }
func (o pausedObject) Source() string              { return o.Name } // a package is named after its sandbox
func (o pausedObject) Kind() string                { return "PausedSandbox" }
func (o pausedObject) Obj() client.Object          { return o.PausedSandbox }

// Node is what the agent knows of its node.
type Node struct {
	Name string
	// SandlotRoot is the shims' <root>: <root>/pods/<podUID>/control.sock.
	SandlotRoot string
	Store       store.Store
	// SharedStore says other nodes restore from Store (s3, juicefs): base
	// disks go into it and cross-node resumes are possible.
	SharedStore bool
	// StageSocket is where the shims ask for data to restore
	// (package stageapi); "" serves none.
	StageSocket string
	// Dialer reaches a pod's shim; nil dials its socket under SandlotRoot.
	Dialer ControlDialer
	// APIService is sandlot-api's Service: its pods may open connections
	// to the sandboxes ("": only the node may).
	APIService types.NamespacedName
	// PodIP is the agent's own address when it runs in a pod (the chart's
	// DaemonSet): a template build reaches its builder's guest from it, so
	// the shims admit it like sandlot-api's pods ("": the agent runs in
	// the node's network namespace, whose addresses are admitted anyway).
	PodIP string
	// ClaimKey opens what the controller sealed to this node (a claim's
	// token and env, a builder's token): the agent reads no Secret.
	ClaimKey *sealed.Key
}

// snapshotTimeout bounds the shim's Snapshot (it pauses the VM for
// milliseconds; persisting RAM and disk takes seconds).
const snapshotTimeout = 5 * time.Minute

// remotePoll is how often a snapshot's remote status is read until final.
const remotePoll = time.Second

func (r *DataReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	snap := r.New()
	if err := r.Get(ctx, req.NamespacedName, snap.Obj()); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if nodeOf(snap) != r.Name {
		return ctrl.Result{}, nil
	}
	if snap.GetDeletionTimestamp() != nil {
		return r.deleteData(ctx, snap)
	}
	if controllerutil.AddFinalizer(snap.Obj(), sandlotv1.FinalizerData) {
		if err := r.Update(ctx, snap.Obj()); err != nil {
			return ctrl.Result{}, fmt.Errorf("add data finalizer to %s: %w", req, err)
		}
	}
	orig := snap.Obj().DeepCopyObject().(client.Object)
	before, startRV := *snap.Data().DeepCopy(), snap.GetResourceVersion()
	startFromSpec(snap) // written with the first status patch
	res, err := r.phase(ctx, snap, &orig)
	snap.Data().ObservedGeneration = snap.GetGeneration()
	// A poll that changed nothing writes nothing (remote status is read
	// every 200 ms while an upload is young).
	unchanged := orig.GetResourceVersion() == startRV && equality.Semantic.DeepEqual(before, *snap.Data())
	if !unchanged {
		if perr := r.patchStatus(ctx, snap, &orig); perr != nil {
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("status of %s %s: %w", snap.Kind(), req, perr))
		}
	}
	observeData(snap.Kind(), snap.GetCreationTimestamp(), before, *snap.Data())
	r.dataEvents(snap, before.Conditions)
	return res, err
}

// dataEvents tells the data's story on its object, after the status write:
// ready, failed (with the reason), and a remote status that became Ready
// or Failed (not each step of an upload).
func (r *DataReconciler) dataEvents(snap dataObject, old []metav1.Condition) {
	for _, c := range snap.Data().Conditions {
		switch {
		case c.Type == sandlotv1.ConditionReady:
		case c.Type == sandlotv1.ConditionRemoteReady &&
			(c.Reason == string(sandlotv1.RemoteReady) || c.Reason == string(sandlotv1.RemoteFailed)):
		default:
			continue
		}
		// Every Ready=False the agent writes is a failure (setFailed), and
		// so is a RemoteReady=False that got here.
		conditionEvents(r.Recorder, snap.Obj(), nil, actionData, old, c, c.Status != metav1.ConditionTrue)
	}
}

// patchStatus writes the status changes since *orig, guarded by its
// resourceVersion (the controller writes other fields of it), and makes
// the result the new *orig.
func (r *DataReconciler) patchStatus(ctx context.Context, snap dataObject, orig *client.Object) error {
	if err := r.Status().Patch(ctx, snap.Obj(), client.MergeFromWithOptions(*orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	*orig = snap.Obj().DeepCopyObject().(client.Object)
	return nil
}

// phase moves the snapshot one step: take it, recover from an agent that
// died while taking it, or follow its remote status.
func (r *DataReconciler) phase(ctx context.Context, snap dataObject, orig *client.Object) (ctrl.Result, error) {
	st := snap.Data()
	switch st.Phase {
	case sandlotv1.DataPending:
		if snap.Source() == "" {
			return ctrl.Result{}, nil // imports are the controller's
		}
		return ctrl.Result{}, r.take(ctx, snap, orig)
	case sandlotv1.DataCreating:
		return r.recover(ctx, snap)
	case sandlotv1.DataReady:
		return r.followRemote(ctx, snap)
	}
	return ctrl.Result{}, nil
}

// key is the object's store key; a UID is never empty on a stored object.
// recover finishes data an agent that died left Creating: committed data
// is finished; a snapshot the shim completed after the agent died (it
// runs to its end) is verified file by file and committed; anything else
// is removed and the object Failed — never a half-written Ready.
func (r *DataReconciler) recover(ctx context.Context, snap dataObject) (ctrl.Result, error) {
	k := key(snap)
	if _, err := r.Store.Status(ctx, k); err == nil {
		return ctrl.Result{RequeueAfter: remotePoll}, r.finish(ctx, snap)
	}
	if err := r.waitForShim(ctx, snap); err != nil {
		return ctrl.Result{}, err
	}
	if err := snapshot.Verify(r.Store.Dir(k)); err == nil {
		log.FromContext(ctx).Info("the shim completed the snapshot after the agent restarted: committing it", "object", snap.GetName())
		return ctrl.Result{RequeueAfter: remotePoll}, r.commit(ctx, snap)
	}
	if err := r.discard(ctx, snap); err != nil {
		return ctrl.Result{}, err
	}
	setFailed(snap.Data(), snap.GetGeneration(), "AgentRestarted",
		"the node agent restarted while taking the snapshot and it did not complete; its partial data was removed")
	return ctrl.Result{}, nil
}

// waitForShim returns once the sandbox's shim is not writing a snapshot:
// its Stats waits for the VM's lock, which a snapshot holds to its end.
// No pod, no shim, no writer.
func (r *DataReconciler) waitForShim(ctx context.Context, snap dataObject) error {
	pod, err := r.sandboxPod(ctx, snap)
	if err != nil {
		return nil
	}
	c, err := r.dial(ctx, string(pod.UID))
	if err != nil {
		return nil
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	if _, err := c.Stats(ctx, &controlapi.StatsRequest{}); err != nil && ctx.Err() != nil {
		return fmt.Errorf("wait for the shim of %s to finish a snapshot: %w", snap.GetName(), err)
	}
	return nil
}

func key(o dataObject) string {
	k, _ := stageapi.Key(o.Kind(), string(o.GetUID()))
	return k
}

// take asks the sandbox's shim for the snapshot, straight into the store.
func (r *DataReconciler) take(ctx context.Context, snap dataObject, orig *client.Object) error {
	st := snap.Data()
	pod, err := r.sandboxPod(ctx, snap)
	if err != nil {
		setFailed(st, snap.GetGeneration(), "SandboxNotRunning", err.Error())
		return nil
	}
	// Record Creating first (its own write): a restarted agent must know
	// a snapshot was under way.
	st.Phase = sandlotv1.DataCreating
	if err := r.patchStatus(ctx, snap, orig); err != nil {
		return err
	}
	if err := r.discard(ctx, snap); err != nil { // an earlier attempt's leftovers
		return err
	}
	dir := r.Store.Dir(key(snap))
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	c, err := r.dial(ctx, string(pod.UID))
	if err != nil {
		setFailed(st, snap.GetGeneration(), "ShimUnreachable", err.Error())
		return nil
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, snapshotTimeout) // a hung shim must not hold a worker for ever
	defer cancel()
	// A pause package: memory and disk layer taken at the instant the
	// VM stopped (consistent without the guest syncing its disks).
	err = halt(sctx, c, snap)
	var resp *controlapi.SnapshotResponse
	if err == nil {
		resp, err = c.Snapshot(sctx, &controlapi.SnapshotRequest{Dir: dir})
	}
	if err != nil {
		r.resumeHalted(ctx, snap)
		setFailed(st, snap.GetGeneration(), "SnapshotFailed", err.Error())
		return nil
	}
	log.FromContext(ctx).Info("data taken", "object", snap.GetName(), "paused", time.Duration(resp.GetPausedNanos()),
		"took", time.Duration(resp.GetTookNanos()))
	if err := r.commit(ctx, snap); err != nil || st.Phase == sandlotv1.DataFailed {
		r.resumeHalted(ctx, snap)
		return err
	}
	return nil
}

// commit hands a complete snapshot directory to the store, made
// restorable on other nodes first, and marks it Ready.
func (r *DataReconciler) commit(ctx context.Context, snap dataObject) error {
	st := snap.Data()
	if err := r.layout.makePortable(ctx, key(snap)); err != nil {
		setFailed(st, snap.GetGeneration(), "StoreFailed", "make the snapshot restorable on other nodes: "+err.Error())
		return r.discard(ctx, snap)
	}
	if _, err := r.Store.Commit(ctx, key(snap)); err != nil {
		setFailed(st, snap.GetGeneration(), "StoreFailed", err.Error())
		return nil
	}
	return r.finish(ctx, snap)
}

// discard removes what an unfinished attempt left in the store: the
// store knows its own layout and records.
func (r *DataReconciler) discard(ctx context.Context, snap dataObject) error {
	return discardUncommitted(ctx, r.Store, key(snap))
}

// sandboxPod is the running pod of the snapshot's sandbox, on this node.
// The sandbox is read from the cache, which holds it while its status
// places it here (the controller assigns a Snapshot to that node), and
// past it when the cache does not: its status write not seen yet, or
// since cleared (a pause package's sandbox once Paused, which recover and
// resumeHalted may still ask about). "Not found" there fails the
// snapshot, and tells recover that no shim writes one: the cache's word
// alone is not enough for either.
func (r *DataReconciler) sandboxPod(ctx context.Context, snap dataObject) (*corev1.Pod, error) {
	sbx := &sandlotv1.Sandbox{}
	key := client.ObjectKey{Namespace: snap.GetNamespace(), Name: snap.Source()}
	err := r.Get(ctx, key, sbx)
	if apierrors.IsNotFound(err) && r.Reader != nil {
		err = r.Reader.Get(ctx, key, sbx)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", snap.Source(), err)
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: snap.GetNamespace(), Name: sbx.Status.PodName}, pod); err != nil {
		return nil, fmt.Errorf("pod of sandbox %s: %w", sbx.Name, err)
	}
	if pod.Spec.NodeName != r.Name || pod.Status.Phase != corev1.PodRunning {
		return nil, fmt.Errorf("sandbox %s is not running on %s", sbx.Name, r.Name)
	}
	return pod, nil
}

// applyManifest records what the snapshot holds. Location is the data's
// directory on this node (the local store's restore path).
func applyManifest(st *sandlotv1.DataStatus, m *snapshot.Manifest, dir string) {
	st.Location = dir
	st.TotalBytes = m.TotalBytes(dir)
	st.DirtyBytes = m.DirtyBytes
	st.SourcePausedMicroseconds = m.PausedNanos / 1000
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
func (r *DataReconciler) finish(ctx context.Context, snap dataObject) error {
	st := snap.Data()
	rs, err := r.layout.remote(ctx, key(snap))
	if err != nil {
		return err
	}
	dir := r.Store.Dir(key(snap))
	m, err := snapshot.ReadManifest(dir)
	if err != nil {
		return fmt.Errorf("manifest of %s: %w", snap.GetName(), err)
	}
	applyManifest(st, m, dir)
	st.Phase = sandlotv1.DataReady
	setRemote(st, snap.GetGeneration(), rs)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sandlotv1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: "Persisted", Message: "data persisted on " + r.Name, ObservedGeneration: snap.GetGeneration()})
	return nil
}

// followRemote reads the remote status until it is final.
func (r *DataReconciler) followRemote(ctx context.Context, snap dataObject) (ctrl.Result, error) {
	st := snap.Data()
	if remoteFinal(st.RemoteStatus) {
		return ctrl.Result{}, nil
	}
	rs, err := r.layout.remote(ctx, key(snap))
	if err != nil {
		return ctrl.Result{}, err
	}
	setRemote(st, snap.GetGeneration(), rs)
	if !remoteFinal(st.RemoteStatus) {
		return ctrl.Result{RequeueAfter: remotePollAfter(st.CompletionTime)}, nil
	}
	return ctrl.Result{}, nil
}

// remotePollAfter: a small upload ends within a second or two of the
// data being persisted, so its remote status is read every 200 ms for
// the first 15 s (a second's poll made remote Ready up to a second late),
// then every second.
func remotePollAfter(completed *metav1.Time) time.Duration {
	if completed != nil && time.Since(completed.Time) < 15*time.Second {
		return 200 * time.Millisecond
	}
	return remotePoll
}

// remoteFinal: the remote status changes no more.
func remoteFinal(r sandlotv1.RemoteStatus) bool {
	return r == sandlotv1.RemoteReady || r == sandlotv1.RemoteFailed || r == sandlotv1.RemoteNotApplicable
}

// setRemote records a remote status and, for a store other nodes read,
// the RemoteReady condition with the store's reason (retries, failure).
func setRemote(st *sandlotv1.DataStatus, gen int64, rs store.Status) {
	if rs.Remote == store.RemotePending && rs.Message == "" {
		rs.Message = "upload queued"
	}
	st.RemoteStatus = remoteStatus(rs.Remote)
	cond := metav1.Condition{Type: sandlotv1.ConditionRemoteReady, Status: metav1.ConditionFalse,
		Reason: string(st.RemoteStatus), Message: rs.Message, ObservedGeneration: gen}
	switch st.RemoteStatus {
	case sandlotv1.RemoteNotApplicable:
		return
	case sandlotv1.RemoteReady:
		t := metav1.NewTime(rs.ReadyTime)
		st.RemoteReadyTime = &t
		cond.Status = metav1.ConditionTrue
		if cond.Message == "" {
			cond.Message = "every file and the data it depends on are in the store"
		}
	}
	if cond.Message == "" {
		cond.Message = "remote status " + string(rs.Remote)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

// deleteData removes the data once the controller let the Snapshot go
// (it holds deletion while a Sandbox restores from it).
func (r *DataReconciler) deleteData(ctx context.Context, snap dataObject) (ctrl.Result, error) {
	if controllerutil.ContainsFinalizer(snap.Obj(), sandlotv1.FinalizerInUse) || !controllerutil.ContainsFinalizer(snap.Obj(), sandlotv1.FinalizerData) {
		return ctrl.Result{}, nil
	}
	r.resumeHalted(ctx, snap) // unpaused before its pod went: the VM runs on
	err := r.Store.Delete(ctx, key(snap))
	switch {
	case errors.Is(err, store.ErrInUse):
		return ctrl.Result{RequeueAfter: remotePoll}, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return ctrl.Result{}, fmt.Errorf("delete data of %s: %w", snap.GetName(), err)
	}
	controllerutil.RemoveFinalizer(snap.Obj(), sandlotv1.FinalizerData)
	if err := r.Update(ctx, snap.Obj()); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

func setFailed(st *sandlotv1.DataStatus, gen int64, reason, msg string) {
	st.Phase = sandlotv1.DataFailed
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sandlotv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: reason, Message: msg, ObservedGeneration: gen})
}
