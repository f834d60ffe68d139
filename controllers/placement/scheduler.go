package placement

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Scheduler places sandboxes on nodes. Its state is in memory and this
// process's own: the placements it made that the cache does not show yet
// (an assume cache, as the kube-scheduler keeps), the last usage read,
// and the nodes whose pool refills wait for a start (Holds).
type Scheduler struct {
	// Sandboxes lists the cluster's Sandboxes (the manager's cache).
	Sandboxes client.Reader
	// Pods reads every node's bound, non-terminated pods, stripped to
	// their requests (NewPodUsageView).
	Pods client.Reader
	// MilliCPUPerVCPU is the CPU a sandbox pod requests per vCPU.
	MilliCPUPerVCPU int64
	// Holds are shared with the warm pools' refills (nil: none).
	Holds *Holds

	mu sync.Mutex
	// last is the last usage read for a fresh sandbox (mu).
	last    *usageRead
	assumed assumedPlacements
}

// Place places a sandbox and assumes the placement (counts it as used
// until the cache shows its pod) before any other worker reads the
// nodes' usage: with several workers, placements are serialised here
// and nowhere else. fresh: the sandbox was never placed (nothing of it to
// leave out of the usage). With no room anywhere, the placement may name
// pool pods to give way, promised to this start.
func (s *Scheduler) Place(ctx context.Context, key types.NamespacedName, fresh bool, req Request,
	overhead corev1.ResourceList) (Placement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	used, pods, err := s.usage(ctx, key, fresh, overhead)
	if err != nil {
		return Placement{}, err
	}
	req.Used = used
	p := place(req)
	switch {
	case p.Node != "":
		s.assumed.assume(key, p.Node, req.Demand)
	default: // no room anywhere: pool pods may give way
		now := time.Now()
		if p.Yield = yieldFor(req, s.Holds.unpromised(spareOf(pods), key, now)); p.Yield != nil {
			s.Holds.promise(key, p.Yield.Give, now)
		}
	}
	return p, nil
}

// Forget drops the assumed placement of key: its pod was not made, or
// the sandbox is gone.
func (s *Scheduler) Forget(key types.NamespacedName) { s.assumed.forget(key) }

// Bound says the start key placed on node has its pod: the node's pool
// may refill around it.
func (s *Scheduler) Bound(node string, key types.NamespacedName) { s.Holds.Release(node, key) }

// occupiesNode: a sandbox takes room on its node from placement until its
// pod is gone (paused or terminal sandboxes have none running).
func occupiesNode(s *sandlotv1.Sandbox) bool {
	return s.Status.NodeName != "" && s.Status.Resources != nil &&
		s.Status.Phase != sandlotv1.SandboxPaused && !s.Status.Phase.Terminal()
}

// assumedPlacements remembers placements until the cache reflects them,
// as the scheduler's assume cache does, so two sandboxes reconciled back
// to back do not both take the last room on a node.
type assumedPlacements struct {
	mu sync.Mutex
	m  map[types.NamespacedName]assumption
}

type assumption struct {
	node   string
	demand Demand
	at     time.Time
}

func (a *assumedPlacements) assume(key types.NamespacedName, node string, d Demand) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.NamespacedName]assumption{}
	}
	a.m[key] = assumption{node: node, demand: d, at: time.Now()}
}

func (a *assumedPlacements) forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, key)
}

// pending returns the assumptions the cache does not show yet and drops
// the ones it does (or that are too old to matter).
func (a *assumedPlacements) pending(inCache map[types.NamespacedName]bool) map[types.NamespacedName]assumption {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[types.NamespacedName]assumption{}
	for key, v := range a.m {
		if inCache[key] || time.Since(v.at) > time.Minute {
			delete(a.m, key)
			continue
		}
		out[key] = v
	}
	return out
}

// usage is nodeUsage of the cluster now, with the placements this
// controller made that the cache does not show yet. For a fresh sandbox
// (never placed: nothing of it to leave out) a usage read less than
// usageReuse ago serves again: at fleet rates each read lists every
// sandbox and pod, and the assume cache counts what was placed since.
// What ended since still counts for that long (room freed a moment late).
// It also returns the pods read (the cache's, not to be changed).
func (s *Scheduler) usage(ctx context.Context, self types.NamespacedName, fresh bool, overhead corev1.ResourceList) (map[string]Demand, []corev1.Pod, error) {
	snap := s.last
	if !fresh || snap == nil || time.Since(snap.at) > usageReuse || !equality.Semantic.DeepEqual(snap.overhead, overhead) {
		if fresh {
			self = types.NamespacedName{}
		}
		list := &sandlotv1.SandboxList{}
		// Read only, like the pods below: not copied.
		if err := s.Sandboxes.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, nil, fmt.Errorf("list sandboxes: %w", err)
		}
		pods := &corev1.PodList{}
		// Read only, and every pod of the cluster: not copied.
		if err := s.Pods.List(ctx, pods, client.UnsafeDisableDeepCopy); err != nil {
			return nil, nil, fmt.Errorf("list pods for node usage: %w", err)
		}
		used, shown := nodeUsage(pods.Items, list.Items, self, func(res sandlotv1.Resources) Demand {
			return DemandOf(res, overhead, s.MilliCPUPerVCPU)
		})
		snap = &usageRead{at: time.Now(), overhead: overhead, used: used, shown: shown, pods: pods.Items}
		if fresh {
			s.last = snap
		}
	}
	used := maps.Clone(snap.used)
	for key, a := range s.assumed.pending(snap.shown) {
		if key != self {
			used[a.node] = used[a.node].Add(a.demand)
		}
	}
	return used, snap.pods, nil
}

// usageReuse is how long a usage read serves fresh sandboxes' placements.
const usageReuse = 200 * time.Millisecond

// usageRead is one read of the nodes' usage (under mu).
type usageRead struct {
	at       time.Time
	overhead corev1.ResourceList
	used     map[string]Demand
	shown    map[types.NamespacedName]bool
	pods     []corev1.Pod // read only: the usage view's

}
