package placement

import (
	"slices"
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

// Holds are the nodes whose pool refills wait for starts their pool
// pods gave way to, each start's hold its own: placing one start
// releases only its hold. The Sandbox and Template reconcilers share one
// (controllers.SetupAll); nil holds none.
type Holds struct {
	mu    sync.Mutex
	since map[string]map[types.NamespacedName]time.Time // node → start → when it first held
	// promised are the pool pods given up for a start, by UID: another
	// start waiting on the node does not count their room as its own.
	promised map[types.UID]promise
}

type promise struct {
	start types.NamespacedName
	at    time.Time
}

// Hold records start's hold on node (once) and says whether it still
// lasts at now.
func (h *Holds) Hold(node string, start types.NamespacedName, now time.Time) bool {
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

// Release drops start's hold on node, and the pods promised to it: it is
// placed there.
func (h *Holds) Release(node string, start types.NamespacedName) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.since[node], start)
	if len(h.since[node]) == 0 {
		delete(h.since, node)
	}
	for uid, p := range h.promised {
		if p.start == start {
			delete(h.promised, uid)
		}
	}
}

// promise records the pool pods given up for start (called under the
// placement lock, before they are deleted: no other start can pick them
// in between).
func (h *Holds) promise(start types.NamespacedName, give []Spare, now time.Time) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.promised == nil {
		h.promised = map[types.UID]promise{}
	}
	for _, s := range give {
		h.promised[s.UID] = promise{start: start, at: now}
	}
}

// unpromised is spare without the pods promised to starts other than
// start in the last roomHold (older promises are dropped).
func (h *Holds) unpromised(spare map[string][]Spare, start types.NamespacedName, now time.Time) map[string][]Spare {
	if h == nil {
		return spare
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for uid, p := range h.promised {
		if now.Sub(p.at) >= roomHold {
			delete(h.promised, uid)
		}
	}
	if len(h.promised) == 0 {
		return spare
	}
	out := make(map[string][]Spare, len(spare))
	for node, pods := range spare {
		out[node] = slices.DeleteFunc(slices.Clone(pods), func(s Spare) bool {
			p, ok := h.promised[s.UID]
			return ok && p.start != start
		})
	}
	return out
}

// Held: some start's hold on node lasts at now.
func (h *Holds) Held(node string, now time.Time) bool {
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
