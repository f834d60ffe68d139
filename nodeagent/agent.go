// Package nodeagent is sandlot's node agent (a DaemonSet in production):
// it does the node-side work for the Snapshots assigned to its node and
// reports whether each sandbox's VM answers (VMReady), talking to the
// shims over their control sockets and keeping the data in the store.
// Its caches hold only objects for its node.
package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// FieldManager is the agent's server-side-apply identity.
const FieldManager = "sandlot-agent"

// CacheOptions keep only this node's objects: Snapshots and
// PausedSandboxes the controller labelled for it, Sandboxes whose status
// places them on it (status.nodeName, a selectable field of the CRD: at a
// thousand nodes a Sandbox write would otherwise go to a thousand agents),
// pods scheduled to it. A Sandbox enters the cache with the status write
// that names its node and pod, and leaves it when that is cleared (paused,
// sent back to placement): the agent reads past the cache a Sandbox it
// has to find (stageguard.go, data.go).
// api is sandlot-api's Service: its EndpointSlices only. Cached objects
// drop their managedFields (never read; server-side apply needs none).
func CacheOptions(node string, api types.NamespacedName) cache.Options {
	onNode := labels.SelectorFromSet(labels.Set{sandlotv1.LabelNode: node})
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&sandlotv1.Snapshot{}:      {Label: onNode},
		&sandlotv1.PausedSandbox{}: {Label: onNode},
		&sandlotv1.Sandbox{}:       {Field: fields.OneTermEqualSelector("status.nodeName", node)},
		&corev1.Pod{}:              {Field: fields.OneTermEqualSelector("spec.nodeName", node)},
		&discoveryv1.EndpointSlice{}: {Namespaces: map[string]cache.Config{api.Namespace: {}},
			Label: labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: api.Name})},
	}}
}

// dataWorkers is how many Snapshots (and as many pause packages) one
// agent takes at once.
const dataWorkers = 4

// probeWorkers probe pods and activate warm pool claims concurrently.
const probeWorkers = 4

// Setup registers the agent's reconcilers. They record Events as
// EventSource.
func Setup(mgr ctrl.Manager, n Node) error {
	l := &layout{store: n.Store, shared: n.SharedStore}
	c, rec := mgr.GetClient(), mgr.GetEventRecorder(EventSource)
	if s, ok := n.Store.(interface{ HoldWhile(func(string) bool) }); ok {
		s.HoldWhile((&restoreHolds{cache: c, layout: l}).held)
	}
	// Snapshots of different VMs are taken side by side (the shim
	// serializes those of one VM).
	opts := controller.Options{MaxConcurrentReconciles: dataWorkers}
	if err := ctrl.NewControllerManagedBy(mgr).Named("snapshot").For(&sandlotv1.Snapshot{}).WithOptions(opts).
		Complete(&DataReconciler{Client: c, Reader: mgr.GetAPIReader(), Recorder: rec, Node: n, layout: l,
			New: func() dataObject { return snapshotObject{&sandlotv1.Snapshot{}} }}); err != nil {
		return fmt.Errorf("snapshot reconciler: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("pausedsandbox").For(&sandlotv1.PausedSandbox{}).WithOptions(opts).
		Complete(&DataReconciler{Client: c, Reader: mgr.GetAPIReader(), Recorder: rec, Node: n, layout: l,
			New: func() dataObject { return pausedObject{&sandlotv1.PausedSandbox{}} }}); err != nil {
		return fmt.Errorf("pausedsandbox reconciler: %w", err)
	}
	guard := &stageGuard{api: mgr.GetAPIReader(), cache: c, node: n.Name}
	refusals := &refusalReporter{api: mgr.GetAPIReader(), rec: rec, node: n.Name}
	if n.StageSocket != "" {
		srv := newStageServer(l, guard)
		srv.refusals = refusals
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return srv.Serve(ctx, n.StageSocket) })); err != nil {
			return fmt.Errorf("stage server: %w", err)
		}
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("rollback").For(&sandlotv1.Sandbox{}).
		Complete(&RollbackReconciler{Client: c, Recorder: rec, Node: n, layout: l}); err != nil {
		return fmt.Errorf("rollback reconciler: %w", err)
	}
	// Pods are probed (and claimed warm pool VMs activated) side by side:
	// one at a time, fifty claims wait on each other. More than four at a
	// time was slower under TCG (16: 9.8 creates/s at 10 concurrent
	// against 12.1 with 4): the guests resuming share two cores.
	if err := registerSandboxCollector(c, n); err != nil {
		return fmt.Errorf("per-sandbox metrics: %w", err)
	}
	vr := &VMReadyReconciler{Client: c, Reader: mgr.GetAPIReader(), Recorder: rec, Node: n, layout: l, guard: guard, refusals: refusals,
		builds: &builds{Client: c, Reader: mgr.GetAPIReader(), Recorder: rec, Node: n.Name, key: n.ClaimKey,
			guest: func(ip, token string) guestRunner { return newGuestExec(ip, token) }}}
	probes := controller.Options{MaxConcurrentReconciles: probeWorkers}
	if err := ctrl.NewControllerManagedBy(mgr).Named("vmready").For(&corev1.Pod{}).WithOptions(probes).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(vr.sandboxPods)).
		Watches(&sandlotv1.Sandbox{}, handler.EnqueueRequestsFromMapFunc(vr.podOfSandbox),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(vr); err != nil {
		return fmt.Errorf("vmready reconciler: %w", err)
	}
	return nil
}

// VMReadyReconciler sets VMReady on the Sandbox of each sandlot pod on
// this node: True once the pod's shim answers for a running VM.
type VMReadyReconciler struct {
	client.Client
	// Reader reads what the agent does not cache (a data object a claim
	// restores, when the cache does not hold it yet).
	Reader client.Reader
	// Recorder tells each Sandbox's story (VMReady, claims); nil records
	// no Events.
	Recorder events.EventRecorder
	Node
	// pushed is what each pod's shim was last told (rules and ingress).
	pushed podMemo
	// activated is the claim carried out in each pod (claimID) while its
	// record on the pod may not show in the cache yet: the VMReady write
	// wakes the pod again before it does, and a claim is carried out once.
	activated podMemo
	// layout and guard open and check the data a claim restores;
	// refusals records data refused for it on the data's object.
	layout   *layout
	guard    *stageGuard
	refusals *refusalReporter
	// builds runs template builders' steps once their VM runs.
	builds *builds
}

// vmReadyPoll re-checks a VM that does not answer yet.
const vmReadyPoll = 2 * time.Second

func (r *VMReadyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.pushed.forget(req.NamespacedName)
			r.activated.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	name := pod.Labels[sandlotv1.LabelSandbox]
	if name == "" || pod.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	status, reason, msg, guest := r.probe(ctx, pod)
	// A claimed pool pod: its VM resumed with its sandbox's identity, or
	// the sandbox's data restored into it (a start slot's only way).
	claim, err := r.carryOut(ctx, pod, reason)
	switch {
	case err != nil:
		status, reason, msg = metav1.ConditionFalse, sandlotv1.ReasonClaimFailed, err.Error()
	case claim == claimDone:
		status, reason, msg, guest = r.probe(ctx, pod)
	}
	if (reason == "VMPaused" || reason == "VMRunning") && !sandlotv1.ClaimPending(pod.Annotations) {
		if err := r.pushNetwork(ctx, pod); err != nil {
			status, reason, msg = metav1.ConditionFalse, sandlotv1.ReasonNetworkFailed, err.Error()
		}
	}
	sbx := &sandlotv1.Sandbox{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, sbx); apierrors.IsNotFound(err) {
		return ctrl.Result{RequeueAfter: vmReadyPoll}, nil // its status does not place it here (yet): its arrival wakes the pod
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("sandbox %s of pod %s: %w", name, pod.Name, err)
	}
	if claim == claimDone || claim == claimUnannounced {
		event(r.Recorder, sbx, pod, false, ReasonClaimActivated, actionClaim, claimStory(pod, r.Name, sbx.Name))
		r.activated.set(pod, claimID(pod)+announcedMark)
	}
	changed, err := r.applyVMReady(ctx, sbx, pod, vmReady{status, reason, msg, guest})
	if err != nil {
		return ctrl.Result{}, err
	}
	if claim != claimNone {
		if err := r.markActivated(ctx, pod); err != nil {
			return ctrl.Result{}, err
		}
	}
	if changed && status == metav1.ConditionTrue && pod.Annotations[sandlotv1.AnnotationPool] == "" {
		observeRestore("start", time.Since(pod.CreationTimestamp.Time))
	}
	if status != metav1.ConditionTrue {
		return ctrl.Result{RequeueAfter: vmReadyPoll}, nil
	}
	if r.builds != nil {
		if err := r.builds.maybeStart(ctx, sbx, pod); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// claimOutcome is what carryOut found of a pod's claim.
type claimOutcome int

const (
	claimNone        claimOutcome = iota // none to carry out here
	claimDone                            // carried out now
	claimUnannounced                     // carried out before, its Event not sent
	claimAnnounced                       // carried out and announced: only its record on the pod is missing
)

// announcedMark follows a claim's ID in r.activated once its Event is sent.
const announcedMark = "+announced"

// carryOut carries out pod's pending claim (its VM in state) once. A
// claim carried out before is trusted while the VM runs; a VM no longer
// running (a slot empty again, a warm VM paused) gets it carried out
// again (idempotent: the shim restores a request once).
func (r *VMReadyReconciler) carryOut(ctx context.Context, pod *corev1.Pod, state string) (claimOutcome, error) {
	if !sandlotv1.ClaimPending(pod.Annotations) {
		if pod.Annotations[sandlotv1.AnnotationClaim] != "" {
			r.activated.forget(podKey(pod)) // recorded: the cache never shows it pending again
		}
		return claimNone, nil
	}
	if state != "VMPaused" && state != "VMRunning" && state != reasonVMEmpty {
		return claimNone, nil
	}
	id := claimID(pod)
	if done, ok := r.activated.get(pod); ok && strings.HasPrefix(done, id) && state == "VMRunning" {
		if done == id+announcedMark {
			return claimAnnounced, nil
		}
		return claimUnannounced, nil
	}
	began := time.Now()
	if err := r.activate(ctx, pod, state); err != nil {
		return claimNone, err
	}
	r.activated.set(pod, id)
	observeRestore("claim", time.Since(began))
	return claimDone, nil
}

// podOfSandbox is a Sandbox's pod on this node: VMReady is confirmed for
// each new generation of its Sandbox, which no pod event may follow (a
// pause undone before its package was taken leaves the same VM running),
// and when the Sandbox enters the cache (a create event: its status write
// naming this node and the pod, which follows the pod's creation or
// claim): a pod probed before then did not find it.
func (r *VMReadyReconciler) podOfSandbox(_ context.Context, o client.Object) []reconcile.Request {
	sbx, ok := o.(*sandlotv1.Sandbox)
	if !ok || sbx.Status.NodeName != r.Name || sbx.Status.PodName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Status.PodName}}}
}

// reasonVMEmpty: the pod is a start slot with no VM in it yet.
const reasonVMEmpty = "VMEmpty"

// probe asks the pod's shim whether its VM runs, and which guest agent
// it runs ("" when the shim cannot say).
func (r *VMReadyReconciler) probe(ctx context.Context, pod *corev1.Pod) (metav1.ConditionStatus, string, string, string) {
	if pod.Status.Phase != corev1.PodRunning {
		return metav1.ConditionFalse, "PodNotRunning", "pod " + pod.Name + " is " + string(pod.Status.Phase), ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := r.dial(ctx, string(pod.UID))
	if err != nil {
		return metav1.ConditionFalse, "ShimUnreachable", err.Error(), ""
	}
	defer c.Close()
	st, err := c.Stats(ctx, &controlapi.StatsRequest{})
	if err != nil {
		return metav1.ConditionFalse, "VMUnreachable", err.Error(), ""
	}
	switch st.GetState() {
	case "Running":
	case controlapi.StateEmpty:
		return metav1.ConditionFalse, reasonVMEmpty, "no VM runs in start slot " + pod.Name + " until its claim restores one", ""
	default:
		return metav1.ConditionFalse, "VM" + st.GetState(), "the VM is " + st.GetState(), st.GetGuestAgent()
	}
	return metav1.ConditionTrue, "VMRunning", fmt.Sprintf("QEMU %d (%s) runs on %s", st.GetQemuPid(), st.GetAccel(), r.Name), st.GetGuestAgent()
}

// activate pushes a claiming sandbox's identity (ID, env, envd token
// sealed to this node in the claim, hostname) into a warm pool pod's
// paused VM and resumes it, or restores the claim's data into the pod with that identity (a start
// slot, state VMEmpty, has no VM to resume). Each step is idempotent: an
// agent that dies between them (or before markActivated) does all again.
func (r *VMReadyReconciler) activate(ctx context.Context, pod *corev1.Pod, state string) error {
	ann, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
	if err != nil {
		return fmt.Errorf("claim annotations of %s: %w", pod.Name, err)
	}
	if ann.Claim == nil {
		return fmt.Errorf("pod %s carries no claim", pod.Name)
	}
	claim := *ann.Claim
	if state == reasonVMEmpty && claim.Restore == nil {
		return fmt.Errorf("pod %s is a start slot with no VM: its claim must restore the sandbox's data", pod.Name)
	}
	steps := newStepTimer()
	sealedID, err := openClaim(r.ClaimKey, pod, claim)
	if err != nil {
		return err
	}
	token := sealedID.Token
	env := claimEnv(pod, claim, sealedID.Env)
	env[sandlotv1.EnvSandboxID], env[sandlotv1.EnvAccessToken] = claim.SandboxID, token
	steps.done("token")
	c, err := r.dial(ctx, string(pod.UID))
	if err != nil {
		return fmt.Errorf("shim of pod %s: %w", pod.Name, err)
	}
	defer c.Close()
	// The sandbox's rules first: it never runs without them.
	if err := r.syncNetwork(ctx, c, pod); err != nil {
		return err
	}
	steps.done("network")
	id := &controlapi.SetIdentityRequest{SandboxId: claim.SandboxID, AccessToken: token, Env: env, Hostname: claim.SandboxID}
	if claim.Restore != nil {
		return r.restoreClaim(ctx, c, pod, id)
	}
	// Resumed first: the guest answers its control channel only when it
	// runs. Its pod IP is known to no client before the claim shows.
	if state == "VMPaused" {
		if _, err := c.Resume(ctx, &controlapi.ResumeRequest{}); err != nil {
			return fmt.Errorf("resume the claimed VM: %w", err)
		}
		steps.done("resume")
	}
	if _, err := c.SetIdentity(ctx, id); err != nil {
		return fmt.Errorf("push the identity of %s: %w", claim.Sandbox, err)
	}
	steps.done("identity")
	log.FromContext(ctx).Info("warm pool pod claimed: VM resumed with the sandbox's identity", "pod", pod.Name, "sandbox", claim.Sandbox,
		"took", steps.String())
	return nil
}

// claimStory is the Event of a carried-out claim: what the pod was and
// what its VM now runs as.
func claimStory(pod *corev1.Pod, node, sandbox string) string {
	what := "warm pool pod"
	if sandlotv1.IsStartSlot(pod.Annotations) {
		what = "start slot"
	}
	if a, err := sandlotv1.DecodeVMAnnotations(pod.Annotations); err == nil && a.Claim != nil && a.Claim.Restore != nil {
		r := a.Claim.Restore
		return fmt.Sprintf("%s %s on %s restored %s %s as sandbox %s", what, pod.Name, node, r.Kind, r.Name, sandbox)
	}
	return fmt.Sprintf("%s %s on %s resumed with the identity of sandbox %s", what, pod.Name, node, sandbox)
}

// markActivated records a claim as carried out, after the sandbox's
// VMReady (the create waits for that write, not this one): an agent that
// dies between the two activates again, which is idempotent.
func (r *VMReadyReconciler) markActivated(ctx context.Context, pod *corev1.Pod) error {
	orig := pod.DeepCopy()
	pod.Annotations[sandlotv1.AnnotationClaimActivated] = pod.Annotations[sandlotv1.AnnotationClaim]
	if err := r.Patch(ctx, pod, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("record the claim of %s as done: %w", pod.Name, err)
	}
	return nil
}

// vmReady is what a probe found.
type vmReady struct {
	status             metav1.ConditionStatus
	reason, msg, guest string
}

// applyVMReady writes only the agent's fields, by server-side apply: the
// VMReady condition and the guest agent's version (guestVersion, removed
// when the guest does not say); the controller owns every other field of
// the status. changed: the condition's status is new (not only its
// generation). A new status or reason is an Event on the Sandbox.
func (r *VMReadyReconciler) applyVMReady(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod, v vmReady) (bool, error) {
	status, reason, msg := v.status, v.reason, v.msg
	if v.guest == "" && v.reason != "VMRunning" {
		v.guest = sbx.Status.GuestVersion // the shim could not be asked: keep what it said
	}
	c := meta.FindStatusCondition(sbx.Status.Conditions, sandlotv1.ConditionVMReady)
	if c != nil && c.Status == status && c.Reason == reason && c.ObservedGeneration == sbx.Generation && sbx.Status.GuestVersion == v.guest {
		return false, nil
	}
	changed := c == nil || c.Status != status
	fields := map[string]any{"conditions": []any{conditionFields(sandlotv1.ConditionVMReady, status, reason, msg, sbx.Generation)}}
	if v.guest != "" {
		fields["guestVersion"] = v.guest
	}
	if err := applySandboxStatus(ctx, r.Client, sbx.Namespace, sbx.Name, FieldManager, fields); err != nil {
		return false, fmt.Errorf("apply VMReady of sandbox %s: %w", sbx.Name, err)
	}
	conditionEvents(r.Recorder, sbx, pod, actionProbe, sbx.Status.Conditions,
		metav1.Condition{Type: sandlotv1.ConditionVMReady, Status: status, Reason: reason, Message: msg}, false)
	return changed, nil
}
