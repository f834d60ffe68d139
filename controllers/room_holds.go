package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// roomHold is how long a start's hold on a node's pool refills lasts
// after its pool pods gave way, unless it is placed sooner. A hold is not
// extended: a start still waiting after it (a pod that does not go) lets
// the pool refill and is re-placed as any sandbox without room is.
const roomHold = 15 * time.Second

// holdsForget: a hold this old is dropped (a start deleted while it
// waited is never placed to release it); its sandbox may hold again.
const holdsForget = time.Minute

// roomHolds are the nodes whose pool refills wait for starts their pool
// pods gave way to, each start's hold its own: placing one start
// releases only its hold. The Sandbox and Template reconcilers share one
// (SetupAll); nil holds none.
type roomHolds struct {
	mu    sync.Mutex
	since map[string]map[types.NamespacedName]time.Time // node → start → when it first held
}

// hold records start's hold on node (once) and says whether it still
// lasts at now.
func (h *roomHolds) hold(node string, start types.NamespacedName, now time.Time) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since == nil {
		h.since = map[string]map[types.NamespacedName]time.Time{}
	}
	starts := h.since[node]
	if starts == nil {
		starts = map[types.NamespacedName]time.Time{}
		h.since[node] = starts
	}
	for k, t := range starts {
		if now.Sub(t) > holdsForget {
			delete(starts, k)
		}
	}
	first, ok := starts[start]
	if !ok {
		starts[start], first = now, now
	}
	return now.Sub(first) < roomHold
}

// release drops start's hold on node: it is placed there.
func (h *roomHolds) release(node string, start types.NamespacedName) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.since[node], start)
	if len(h.since[node]) == 0 {
		delete(h.since, node)
	}
}

// held: some start's hold on node lasts at now.
func (h *roomHolds) held(node string, now time.Time) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.since[node] {
		if now.Sub(t) < roomHold {
			return true
		}
	}
	return false
}
