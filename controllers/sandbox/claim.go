package sandbox

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/index"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// poolRequest is what a sandbox may take from a template's pool pods.
// A plain claim resumes a warm pod of the template's base revision as it
// is (or has the base restored into a start slot); a restore claim (a
// sandbox from a Snapshot, a resume from its PausedSandbox) has the node
// agent restore the sandbox's own data into the pod in place, so only the
// restore is on the start's path.
type poolRequest struct {
	template     string
	baseRevision string                // plain claims: the revision the pod restored
	restore      *sandlotv1.RestoreRef // restore claims: the data
}

// poolRequestOf is the claim a sandbox's start may make (false: none).
func poolRequestOf(sbx *sandlotv1.Sandbox, src resolvedSource) (poolRequest, bool) {
	switch {
	case len(src.VM.VolumeMounts) > 0:
		// A pool pod's shim started without the sandbox's volumes: it
		// could not serve them. Its own pod serves them from the start.
		return poolRequest{}, false
	case src.Restore.Boot:
		// A pool pod's claim restores memory in place; a boot on the
		// package's disk is its own pod's start.
		return poolRequest{}, false
	case sbx.Spec.Network != nil && sbx.Spec.Network.SecretName != "":
		// Its pod mounts the rules' Secret (pod volumes are fixed at
		// creation): a pool pod has none.
		return poolRequest{}, false
	case len(src.PerNode) > 0 && sbx.Spec.Source.Template != "":
		return poolRequest{template: sbx.Spec.Source.Template, baseRevision: src.BaseRevision}, true
	case src.Restore.UID != "" && src.Template != "":
		rs := src.Restore
		return poolRequest{template: src.Template, restore: &rs}, true
	}
	return poolRequest{}, false
}

// claimPoolPod gives a sandbox one of its template's pool pods — started
// already, so no pod starts — or nil when none fits: a warm pod, or a
// start slot its data is restored into. The claim is a patch guarded by
// the pod's resourceVersion: of two sandboxes claiming one pod, one wins
// and the other tries the next. A pod this sandbox claimed before (its
// status write lost) is found first.
func (r *Reconciler) claimPoolPod(ctx context.Context, sbx *sandlotv1.Sandbox, src resolvedSource, req poolRequest) (*corev1.Pod, error) {
	mine := &corev1.PodList{}
	if err := r.List(ctx, mine, client.InNamespace(sbx.Namespace), client.MatchingFields{index.PodByClaim: index.PoolKey(req.template, sbx.Name)}); err != nil {
		return nil, fmt.Errorf("list claimed pool pods: %w", err)
	}
	for i := range mine.Items {
		if claimedFor(&mine.Items[i], sbx, req) {
			return &mine.Items[i], nil
		}
	}
	free := &corev1.PodList{}
	if err := r.List(ctx, free, client.InNamespace(sbx.Namespace), client.MatchingFields{index.PodByClaim: index.PoolKey(req.template, "")}); err != nil {
		return nil, fmt.Errorf("list pool pods: %w", err)
	}
	candidates, err := r.claimable(ctx, sbx, free.Items, src, req)
	if err != nil {
		return nil, err
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	id, err := r.sandboxIdentity(ctx, sbx)
	if err != nil {
		return nil, err
	}
	for _, c := range candidates {
		// The token and env are sealed to the pod's node: the agent reads
		// no Secret, and the pod's annotations hold neither in the clear.
		box, err := sealFor(c.node, c.pod.Namespace, c.pod.Name, sbx.Name, id)
		if err != nil {
			return nil, err
		}
		claim := &sandlotv1.PoolClaim{Sandbox: sbx.Name, SandboxID: sbx.Status.SandboxID, Restore: c.restore, Sealed: box}
		switch won, err := r.claim(ctx, sbx, c.pod, claim); {
		case err != nil:
			return nil, err
		case won:
			return c.pod, nil
		}
	}
	return nil, nil
}

// claimedFor: pod is sbx's claim of req whose status write was lost — not
// a pool pod the sandbox ran in before a pause, which is still going (or
// holds the VM the pause stopped): a resume taking that one for its claim
// ended Failed ("pod ... is being deleted").
func claimedFor(pod *corev1.Pod, sbx *sandlotv1.Sandbox, req poolRequest) bool {
	if !metav1.IsControlledBy(pod, sbx) || pod.DeletionTimestamp != nil {
		return false
	}
	return req.restore == nil || sandlotv1.PodRestoresFrom(pod.Annotations, req.restore.UID)
}

// claim patches pod as sbx's, guarded by its resourceVersion; won is
// false when another sandbox took it first or the pool let it go.
func (r *Reconciler) claim(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod, claim *sandlotv1.PoolClaim) (bool, error) {
	orig := pod.DeepCopy()
	ann, err := claimAnnotations(pod, claim, sbx.Spec.Network)
	if err != nil {
		return false, fmt.Errorf("claim pool pod %s: %w", pod.Name, err)
	}
	pod.Annotations = ann
	pod.Labels[sandlotv1.LabelSandbox] = sbx.Name
	pod.Labels[sandlotv1.LabelSandboxID] = sbx.Status.SandboxID
	pod.OwnerReferences = []metav1.OwnerReference{ownerRef(sbx)}
	err = r.Patch(ctx, pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("claim pool pod %s: %w", pod.Name, err)
}

// poolCandidate is a pool pod a start may claim and the data its claim
// restores (nil: a warm pod's paused base VM, resumed as it is).
type poolCandidate struct {
	pod     *corev1.Pod
	node    *corev1.Node // the pod's: the claim is sealed to its agent's key
	restore *sandlotv1.RestoreRef
}

// claimable are the pool pods sbx may claim, in the order to try them:
// running, on a node placement would choose now (ready, schedulable, the
// template's constraints: a pool pod of a failed or cordoned node is left
// alone). A plain claim takes a warm pod of the base revision first, else
// a start slot on a node with a Ready base, which the base is restored
// into. A restore claim takes a pod able to host it, those on a node that
// holds the data first, start slots before warm pods (which plain claims
// resume).
func (r *Reconciler) claimable(ctx context.Context, sbx *sandlotv1.Sandbox, pods []corev1.Pod, src resolvedSource, req poolRequest) ([]poolCandidate, error) {
	cons, err := r.constraintsOf(ctx, sbx)
	if err != nil {
		return nil, err
	}
	nodes := map[string]*corev1.Node{}
	var groups [4][]poolCandidate // in the order tried
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		n := r.cachedNode(ctx, nodes, pod.Spec.NodeName)
		if n == nil || placement.IneligibleFor(n, cons) != "" || !hasSealingKey(n) {
			continue
		}
		slot := sandlotv1.IsStartSlot(pod.Annotations)
		if g, c, ok := candidateOf(pod, slot, n, src, req); ok {
			c.node = n
			groups[g] = append(groups[g], c)
		}
	}
	// Each claimant tries the pods in its own order: in one order, N
	// concurrent claims would all patch the first pod, N-1 lose, all
	// patch the second, and so on (N²/2 patches, most of them conflicts).
	var out []poolCandidate
	for _, g := range groups {
		rand.Shuffle(len(g), func(i, j int) { g[i], g[j] = g[j], g[i] })
		out = append(out, g...)
	}
	return out, nil
}

// cachedNode is the named node, read once per claim (nil: gone, or not in
// the cache: not a node to start on).
func (r *Reconciler) cachedNode(ctx context.Context, nodes map[string]*corev1.Node, name string) *corev1.Node {
	n, seen := nodes[name]
	if !seen {
		n = &corev1.Node{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			n = nil
		}
		nodes[name] = n
	}
	return n
}

// candidateOf says whether pod (on node n; slot: a start slot) may serve
// req, with its group in claimable's order and what its claim restores.
func candidateOf(pod *corev1.Pod, slot bool, n *corev1.Node, src resolvedSource, req poolRequest) (int, poolCandidate, bool) {
	if req.restore == nil {
		base, ok := src.PerNode[n.Name]
		switch {
		case !slot && pod.Labels[sandlotv1.LabelBaseRevision] == req.baseRevision:
			return 0, poolCandidate{pod: pod}, true // its VM restored the template's base: resumed as it is
		case slot && ok && fitsVM(pod, src.VM):
			return 1, poolCandidate{pod: pod, restore: &base}, true
		}
		return 0, poolCandidate{}, false
	}
	group := 0
	switch hostsRestore(pod, src, n) {
	case hostNone:
		return 0, poolCandidate{}, false
	case hostRemote:
		group = 2
	}
	if !slot {
		group++
	}
	return group, poolCandidate{pod: pod, restore: req.restore}, true
}

type restoreHost int

const (
	hostNone   restoreHost = iota
	hostLocal              // on a node that holds the data
	hostRemote             // on another node that may fetch it
)

// hostsRestore says whether pod (on node) may host src's restore in
// place: the same image and VM size (fitsVM) on a node that may restore
// the data, as placement decides for a new pod.
func hostsRestore(pod *corev1.Pod, src resolvedSource, node *corev1.Node) restoreHost {
	if !fitsVM(pod, src.VM) {
		return hostNone
	}
	switch local, why := src.Data.On(node); {
	case why != "":
		return hostNone
	case local:
		return hostLocal
	}
	return hostRemote
}

// fitsVM: pod runs vm's image at vm's size — the shim replaces the VM
// under the pod's container and cgroup, which keep both.
func fitsVM(pod *corev1.Pod, vm sandlotv1.VMSpec) bool {
	a, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
	return err == nil && len(pod.Spec.Containers) > 0 && pod.Spec.Containers[0].Image == vm.Image &&
		a.VCPU == vm.Resources.VCPU && a.MemoryMiB == vm.Resources.MemoryMiB && a.WritableLayerMiB == vm.WritableLayerMiB
}

// claimAnnotations are a pool pod's annotations with the claim and the
// sandbox's network rules added, through the codec the shim and the agent
// decode them with.
func claimAnnotations(pod *corev1.Pod, claim *sandlotv1.PoolClaim, network *sandlotv1.SandboxNetwork) (map[string]string, error) {
	a, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
	if err != nil {
		return nil, err
	}
	a.Claim, a.Network = claim, network
	enc, err := a.Encode()
	if err != nil {
		return nil, err
	}
	out := maps.Clone(pod.Annotations)
	maps.Copy(out, enc)
	return out, nil
}

// adoptPoolPod records a claimed pool pod as the sandbox's pod.
func adoptPoolPod(sbx *sandlotv1.Sandbox, pod *corev1.Pod, src resolvedSource, req poolRequest) {
	st := &sbx.Status
	res := src.VM.Resources
	st.Resources = &res
	st.NodeName, st.PodName, st.PodIP = pod.Spec.NodeName, pod.Name, ""
	msg := "claimed " + poolPodKind(pod) + " " + pod.Name + " on " + pod.Spec.NodeName
	from := sandlotv1.PodSource(pod.Annotations)
	switch {
	case req.restore == nil && from != nil:
		st.BaseSnapshot = from.Name // the base its VM restored, or the claim restores
	case req.restore != nil:
		msg += " to restore " + req.restore.Kind + " " + req.restore.Name + " in"
	}
	st.Phase = sandlotv1.SandboxStarting
	st.Reason, st.Message = "", ""
	writes.SetCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionScheduled, metav1.ConditionTrue, claimReason(pod), msg)
	writes.SetCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionReady, metav1.ConditionFalse, sandlotv1.ReasonPodPending, msg)
}

// poolPodKind names a pool pod's kind in messages.
func poolPodKind(pod *corev1.Pod) string {
	if sandlotv1.IsStartSlot(pod.Annotations) {
		return "start slot"
	}
	return "warm pool pod"
}

// claimReason is Scheduled's reason for a sandbox that claimed pod.
func claimReason(pod *corev1.Pod) string {
	if sandlotv1.IsStartSlot(pod.Annotations) {
		return sandlotv1.ReasonClaimedStartSlot
	}
	return sandlotv1.ReasonClaimedFromPool
}

func envMap(env []sandlotv1.EnvVar) map[string]string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return m
}
