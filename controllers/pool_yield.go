package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Pool pods — warm pods and start slots — are capacity held for starts
// that may come, not work: they give way to a start that finds no room.
// When no node fits a sandbox and the unclaimed pool pods on a node it
// may run on hold what it lacks, the fewest of them go (start slots, which
// hold no VM, before warm pods) and that node's pool refills wait until
// the start is placed (roomHolds): otherwise the refill would take back
// the room it was given.

// sparePod is an unclaimed pool pod as the pod usage view shows it.
type sparePod struct {
	key    types.NamespacedName
	uid    types.UID
	rv     string
	demand demand
	slot   bool
	going  bool // being deleted: its room comes without another delete
}

// spareOf is every node's unclaimed pool pods (LabelSandbox present and
// empty: a claim sets it): those going already first, then start slots,
// then by name.
func spareOf(pods []corev1.Pod) map[string][]sparePod {
	out := map[string][]sparePod{}
	for i := range pods {
		p := &pods[i]
		owner, sandlot := p.Labels[sandlotv1.LabelSandbox]
		if !sandlot || owner != "" || p.Spec.NodeName == "" {
			continue
		}
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], sparePod{key: types.NamespacedName{Namespace: p.Namespace, Name: p.Name},
			uid: p.UID, rv: p.ResourceVersion, demand: podDemand(&p.Spec), slot: sandlotv1.IsStartSlot(p.Annotations),
			going: p.DeletionTimestamp != nil})
	}
	rank := func(s sparePod) int {
		switch {
		case s.going:
			return 0
		case s.slot:
			return 1
		}
		return 2
	}
	for _, s := range out {
		slices.SortFunc(s, func(a, b sparePod) int {
			return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.key.String(), b.key.String()))
		})
	}
	return out
}

// poolYield is a node whose pool pods make room for a sandbox: give them
// up and it fits.
type poolYield struct {
	node string
	give []sparePod
}

// yieldFor finds, when no node has room for req, the node that has it
// once the fewest of its spare pool pods are given up: of those holding
// the source data first, then any the sandbox may run on. nil: none does.
func yieldFor(req placementRequest, spare map[string][]sparePod) *poolYield {
	var best *poolYield
	bestLocal := false
	for i := range req.Nodes {
		n := &req.Nodes[i]
		if ineligibleFor(n, req.Constraints) != "" {
			continue
		}
		local, why := req.Source.on(n)
		if why != "" {
			continue
		}
		give, ok := giveUp(n, req.Used[n.Name], req.Demand, spare[n.Name])
		if !ok {
			continue
		}
		better := best == nil || (local && !bestLocal) ||
			(local == bestLocal && (len(give) < len(best.give) || (len(give) == len(best.give) && n.Name < best.node)))
		if better {
			best, bestLocal = &poolYield{node: n.Name, give: give}, local
		}
	}
	return best
}

// giveUp is what of spare, given up, leaves room for want on n: the
// shortest prefix that does, then without each pod not going already
// that the rest make room without (a small pod sorted before a large one
// that alone is enough stays).
func giveUp(n *corev1.Node, used, want demand, spare []sparePod) ([]sparePod, bool) {
	fits := func(give []sparePod) bool {
		u := used
		for _, s := range give {
			u = demand{MilliCPU: u.MilliCPU - s.demand.MilliCPU, Memory: u.Memory - s.demand.Memory}
		}
		_, why := room(n, u, want)
		return why == ""
	}
	for i := 1; i <= len(spare); i++ {
		if !fits(spare[:i]) {
			continue
		}
		give := slices.Clone(spare[:i])
		for j := len(give) - 2; j >= 0; j-- { // the last one was needed
			if without := slices.Delete(slices.Clone(give), j, j+1); !give[j].going && fits(without) {
				give = without
			}
		}
		return give, true
	}
	return nil, false
}

// reclaimPoolPods deletes the yield's pool pods, each only if still
// unclaimed (its resourceVersion: a claim since changed it), and holds
// the node's refills. It says what sbx waits for (an Event, too).
func (r *SandboxReconciler) reclaimPoolPods(ctx context.Context, sbx *sandlotv1.Sandbox, y *poolYield) (string, error) {
	names, deleted := make([]string, 0, len(y.give)), 0
	for _, s := range y.give {
		names = append(names, s.key.String())
		if s.going {
			continue
		}
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name = s.key.Namespace, s.key.Name
		uid, rv := s.uid, s.rv
		err := r.Delete(ctx, pod, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case err == nil:
			deleted++
		case client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err):
			return "", fmt.Errorf("give up pool pod %s for room: %w", s.key, err)
		}
	}
	msg := fmt.Sprintf("no node has room; pool pods %s on %s give way to it", strings.Join(names, ", "), y.node)
	if deleted == 0 { // going already (the usage view shows them until they are gone)
		return msg, nil
	}
	log.FromContext(ctx).Info("pool pods give way to a start", "sandbox", sbx.Name, "node", y.node, "pods", names)
	if r.Recorder != nil {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandlotv1.ReasonReclaimingPoolPods, "Place", "%s", msg)
	}
	return msg, nil
}

// reclaimPoll re-places a sandbox whose room is being made: the pods that
// give way are gone in about a second (no event of theirs wakes it).
const reclaimPoll = 500 * time.Millisecond

// withoutRoom is a start that placement found no node for: it waits,
// for pool pods that give way to it (p.yield) when some may, polled while
// its hold on their node lasts (roomHold), otherwise as retryPlacement
// says (a pod that never goes does not keep it polling).
func (r *SandboxReconciler) withoutRoom(ctx context.Context, sbx *sandlotv1.Sandbox, p placement) (ctrl.Result, error) {
	y := p.yield
	if y == nil {
		setPending(&sbx.Status, sbx.Generation, p.Reason, p.Message)
		return ctrl.Result{RequeueAfter: retryPlacement}, nil
	}
	live := r.Holds.hold(y.node, client.ObjectKeyFromObject(sbx), time.Now())
	msg, err := r.reclaimPoolPods(ctx, sbx, y)
	if err != nil {
		return ctrl.Result{}, err
	}
	setPending(&sbx.Status, sbx.Generation, sandlotv1.ReasonReclaimingPoolPods, msg)
	if !live {
		return ctrl.Result{RequeueAfter: retryPlacement}, nil
	}
	return ctrl.Result{RequeueAfter: reclaimPoll}, nil
}
