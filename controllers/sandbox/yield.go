package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/placement"
)

// reclaimPoolPods deletes the yield's pool pods, each only if still
// unclaimed (its resourceVersion: a claim since changed it), and holds
// the node's refills. It says what sbx waits for (an Event, too).
func (r *Reconciler) reclaimPoolPods(ctx context.Context, sbx *sandlotv1.Sandbox, y *placement.Yield) (string, error) {
	names, deleted := make([]string, 0, len(y.Give)), 0
	for _, s := range y.Give {
		names = append(names, s.Key.String())
		if s.Going {
			continue
		}
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name = s.Key.Namespace, s.Key.Name
		uid, rv := s.UID, s.ResourceVersion
		err := r.Delete(ctx, pod, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case err == nil:
			deleted++
		case client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err):
			return "", fmt.Errorf("give up pool pod %s for room: %w", s.Key, err)
		}
	}
	msg := fmt.Sprintf("no node has room; pool pods %s on %s give way to it", strings.Join(names, ", "), y.Node)
	if deleted == 0 { // going already (the usage view shows them until they are gone)
		return msg, nil
	}
	log.FromContext(ctx).Info("pool pods give way to a start", "sandbox", sbx.Name, "node", y.Node, "pods", names)
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
func (r *Reconciler) withoutRoom(ctx context.Context, sbx *sandlotv1.Sandbox, p placement.Placement) (ctrl.Result, error) {
	y := p.Yield
	if y == nil {
		setPending(&sbx.Status, sbx.Generation, p.Reason, p.Message)
		return ctrl.Result{RequeueAfter: retryPlacement}, nil
	}
	live := r.Scheduler.Holds.Hold(y.Node, client.ObjectKeyFromObject(sbx), time.Now())
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
