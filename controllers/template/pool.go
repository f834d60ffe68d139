package template

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/index"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
)

// A template's warm pool, per node: pods that restore the node's current
// base snapshot and keep the VM paused (the shim pauses it, annotation
// AnnotationPool) until a Sandbox of the template claims one. Its start
// slots are pool pods too, with no VM until a claim restores into them. Unclaimed
// pool pods carry LabelSandbox "" so the controller's cache of sandbox
// pods sees them; a claim sets it (controllers/sandbox/claim.go).

// poolPods are a node's unclaimed pool pods of one kind (warm or start
// slots), by state, and how many claimed ones the node agent has not
// activated yet.
type poolPods struct {
	ready, starting, old, failed []*corev1.Pod
	activating                   int
}

// listPool reads a node's pool pods of a template: its warm pool and its
// start slots (AnnotationBoot BootSlot: pods with no VM a claim restores
// into). Warm pods restored from an older revision, or from a base of
// another guest than the node's Ready base, are old.
func (r *Reconciler) listPool(ctx context.Context, tpl *sandlotv1.Template, node string, base sandlotv1.BaseSnapshot) (warm, slots poolPods, err error) {
	list := &corev1.PodList{}
	if err := r.List(ctx, list, client.InNamespace(tpl.Namespace), client.MatchingFields{index.PodByPool: index.PoolKey(tpl.Name, node)}); err != nil {
		return warm, slots, fmt.Errorf("list pool pods: %w", err)
	}
	rev := BaseRevision(tpl)
	for i := range list.Items {
		pod := &list.Items[i]
		p := &warm
		if sandlotv1.IsStartSlot(pod.Annotations) {
			p = &slots
		}
		switch {
		case pod.Labels[sandlotv1.LabelSandbox] != "":
			if pod.DeletionTimestamp == nil && sandlotv1.ClaimPending(pod.Annotations) {
				p.activating++
			}
		case pod.DeletionTimestamp != nil:
		case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
			p.failed = append(p.failed, pod)
		case pod.Labels[sandlotv1.LabelBaseRevision] != rev || p == &warm && staleGuest(pod, base):
			p.old = append(p.old, pod)
		case pod.Status.Phase == corev1.PodRunning:
			p.ready = append(p.ready, pod)
		default:
			p.starting = append(p.starting, pod)
		}
	}
	return warm, slots, nil
}

// poolStartBatch bounds a node's pool pods starting at once: a refill's
// restores share the node's CPUs with the claims (a pool that refilled
// all at once made its own claims wait), so refills wait until the
// node's claims are carried out, and restores are CPU-bound anyway: more
// at once would not fill the pool sooner. Warm pods and start slots are
// paced apart.
const poolStartBatch = 2

// pool keeps a node's warm pool at spec.warmPool and its start slots at
// slotsOf once the node's base snapshot of this revision is Ready.
func (r *Reconciler) pool(ctx context.Context, tpl *sandlotv1.Template, node string, base sandlotv1.BaseSnapshot) (sandlotv1.NodePool, error) {
	warm, slots, err := r.listPool(ctx, tpl, node, base)
	if err != nil {
		return sandlotv1.NodePool{}, err
	}
	// A claim of either kind being carried out holds both refills: a
	// slot's claim is a restore on the node's CPUs, which a pod start
	// beside it slowed (bench-e2b, start slots at c = 10).
	// A start the node's pool pods gave way to holds them too.
	ready := base.Phase == sandlotv1.BaseReady && base.Revision == BaseRevision(tpl) && warm.activating+slots.activating == 0 &&
		!r.Holds.Held(node, time.Now())
	refused, err := r.keep(ctx, warm, int(tpl.Spec.WarmPool), ready, func() (*corev1.Pod, error) { return r.poolPod(ctx, tpl, node, base) })
	if err != nil {
		return sandlotv1.NodePool{}, fmt.Errorf("warm pool: %w", err)
	}
	slotRefused, err := r.keep(ctx, slots, r.slotsOf(tpl), ready, func() (*corev1.Pod, error) { return r.slotPod(tpl, node) })
	if err != nil {
		return sandlotv1.NodePool{}, fmt.Errorf("start slots: %w", err)
	}
	return sandlotv1.NodePool{Node: node, Ready: int32(len(warm.ready)), Starting: int32(len(warm.starting)),
		Slots: int32(len(slots.ready)), Message: cmp.Or(refused, slotRefused)}, nil
}

// keep holds one kind of a node's pool pods at want: missing pods are
// created (poolStartBatch at a time) when canCreate and the node's
// kubelet did not just refuse one (poolBackoff), extra and failed ones
// deleted; pods of an older base revision go one at a time as new ones
// are ready (all at once when the kind is scaled to zero). It returns why
// none is created now, if the kubelet refused one.
func (r *Reconciler) keep(ctx context.Context, p poolPods, want int, canCreate bool, newPod func() (*corev1.Pod, error)) (string, error) {
	have := len(p.ready) + len(p.starting)
	remove, refused := poolBackoff(p.failed, have < want, time.Now())
	if have > want {
		extra := append(append([]*corev1.Pod{}, p.starting...), p.ready...)
		remove = append(remove, extra[:have-want]...)
	} else if canCreate && refused == "" {
		for range min(want-have, poolStartBatch-len(p.starting)) {
			pod, err := newPod()
			if err != nil {
				return "", err
			}
			if err := r.Create(ctx, pod); err != nil {
				return "", fmt.Errorf("create pool pod on %s: %w", pod.Spec.NodeName, err)
			}
		}
	}
	switch {
	case want == 0:
		remove = append(remove, p.old...)
	case len(p.old) > 0 && len(p.ready) > 0:
		remove = append(remove, p.old[0]) // gradually: one per new pod ready
	}
	for _, pod := range remove {
		uid := pod.UID // never a pod claimed since the list
		if err := r.Delete(ctx, pod, client.Preconditions{UID: &uid, ResourceVersion: &pod.ResourceVersion}); client.IgnoreNotFound(err) != nil &&
			!apierrors.IsConflict(err) {
			return "", fmt.Errorf("delete pool pod %s: %w", pod.Name, err)
		}
	}
	return refused, nil
}

// poolRejectBackoff is how long a node whose kubelet refused a pool pod
// (no room: OutOfcpu, OutOfmemory) gets no new one. Without it the pool
// recreated the refused pod at once, and the kubelet refused it again,
// about once a second for as long as the node stayed full.
const poolRejectBackoff = 30 * time.Second

// poolBackoff splits a node's failed pool pods into those to delete now
// and, when the pool is short there and its kubelet refused one less than
// poolRejectBackoff ago, why no pool pod is created there meanwhile (the
// refused pod is kept until then: it is the record of when). A pool that
// is not short deletes them all: nothing waits on them.
func poolBackoff(failed []*corev1.Pod, short bool, now time.Time) (remove []*corev1.Pod, refused string) {
	for _, pod := range failed {
		if !short || !podspec.KubeletRejections[pod.Status.Reason] || now.Sub(pod.CreationTimestamp.Time) >= poolRejectBackoff {
			remove = append(remove, pod)
			continue
		}
		refused = fmt.Sprintf("kubelet refused pool pod %s (%s: %s); no new pool pod on this node for %v",
			pod.Name, pod.Status.Reason, pod.Status.Message, poolRejectBackoff)
	}
	return remove, refused
}

// poolPod restores the node's base snapshot with the VM paused after.
func (r *Reconciler) poolPod(ctx context.Context, tpl *sandlotv1.Template, node string, base sandlotv1.BaseSnapshot) (*corev1.Pod, error) {
	snap := &sandlotv1.Snapshot{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: tpl.Namespace, Name: base.Snapshot}, snap); err != nil {
		return nil, fmt.Errorf("base snapshot %s: %w", base.Snapshot, err)
	}
	plan := podspec.Plan{Node: node,
		VM:              sandlotv1.VMSpec{Image: tpl.Spec.Image, Resources: tpl.Spec.Resources, WritableLayerMiB: tpl.Spec.WritableLayerMiB},
		Restore:         sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: snap.Name, UID: string(snap.UID), Location: snap.Status.Location},
		MilliCPUPerVCPU: r.MilliCPUPerVCPU, Pool: tpl.Name, Constraints: placement.TemplateConstraints(tpl),
		PullPolicy: r.ImagePullPolicy, PullSecrets: tpl.Spec.ImagePullSecrets}
	pod, err := r.poolPodOf(tpl, node, plan, "-pool-")
	if pod != nil && base.Guest != "" {
		pod.Labels[sandlotv1.LabelBaseGuest] = base.Guest
	}
	return pod, err
}

// staleGuest: a warm pod restored from a base of another guest than the
// node's Ready one (the node was upgraded): it goes as new ones are ready.
func staleGuest(pod *corev1.Pod, base sandlotv1.BaseSnapshot) bool {
	return base.Phase == sandlotv1.BaseReady && pod.Labels[sandlotv1.LabelBaseGuest] != base.Guest
}

// slotsOf is how many start slots each node keeps for tpl.
func (r *Reconciler) slotsOf(tpl *sandlotv1.Template) int {
	if tpl.Spec.Slots != nil {
		return int(*tpl.Spec.Slots)
	}
	return r.SlotsPerNode
}

// slotPod is a start slot of tpl on node: a pod of the template's image
// and size whose shim runs no VM until a claim restores the claimant's
// data into it (the template's base, a Snapshot of its sandboxes, a
// pause package), so that start skips the pod's.
func (r *Reconciler) slotPod(tpl *sandlotv1.Template, node string) (*corev1.Pod, error) {
	plan := podspec.Plan{Node: node,
		VM:              sandlotv1.VMSpec{Image: tpl.Spec.Image, Resources: tpl.Spec.Resources, WritableLayerMiB: tpl.Spec.WritableLayerMiB},
		MilliCPUPerVCPU: r.MilliCPUPerVCPU, Pool: tpl.Name, Slot: true, Constraints: placement.TemplateConstraints(tpl),
		PullPolicy: r.ImagePullPolicy, PullSecrets: tpl.Spec.ImagePullSecrets}
	return r.poolPodOf(tpl, node, plan, "-slot-")
}

// poolPodOf renders plan as a pool pod of tpl on node, unclaimed.
func (r *Reconciler) poolPodOf(tpl *sandlotv1.Template, node string, plan podspec.Plan, kind string) (*corev1.Pod, error) {
	tenv := tpl.Spec.SandboxEnv()
	env := make([]corev1.EnvVar, 0, len(tenv))
	for _, e := range tenv { // the sandbox's identity comes with the claim
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	pod, err := podspec.Render(tpl.Namespace, plan, env)
	if err != nil {
		return nil, err
	}
	pod.GenerateName = shortName(tpl.Name) + kind
	pod.Labels = map[string]string{sandlotv1.LabelPool: tpl.Name, sandlotv1.LabelSandbox: "", sandlotv1.LabelNode: node,
		sandlotv1.LabelBaseRevision: BaseRevision(tpl)}
	pod.OwnerReferences = []metav1.OwnerReference{templateOwner(tpl)}
	return pod, nil
}

// shortName keeps generated names within a DNS label.
func shortName(name string) string {
	if len(name) > 36 {
		return name[:36]
	}
	return name
}
