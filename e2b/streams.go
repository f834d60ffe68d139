package e2b

import (
	"context"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// streams are the requests the proxy is forwarding, by sandbox. When a
// sandbox's VM leaves the pod a request goes to (paused, moved by a
// drain, deleted), the request is cut at once, as E2B ends a paused
// sandbox's streams, and its client reconnects through the proxy, which
// holds it until the sandbox runs again. Left open, such a stream hung
// until TCP keepalive gave up on the vanished pod, minutes later (found
// by make test-drain's E2B client).
type streams struct {
	mu        sync.Mutex
	next      uint64
	bySandbox map[types.UID]map[uint64]inFlight
}

// inFlight is one request in flight: the pod IP it went to, as of
// the sandbox's resourceVersion it was read at.
type inFlight struct {
	podIP, version string
	cancel         context.CancelFunc
}

func newStreams() *streams {
	return &streams{bySandbox: map[types.UID]map[uint64]inFlight{}}
}

// add tracks a request to sbx's current pod, cut by cancel; the caller
// calls done when the request ends.
func (s *streams) add(sbx *sandlotv1.Sandbox, cancel context.CancelFunc) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	id := s.next
	if s.bySandbox[sbx.UID] == nil {
		s.bySandbox[sbx.UID] = map[uint64]inFlight{}
	}
	s.bySandbox[sbx.UID][id] = inFlight{podIP: sbx.Status.PodIP, version: sbx.ResourceVersion, cancel: cancel}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.bySandbox[sbx.UID], id)
		if len(s.bySandbox[sbx.UID]) == 0 {
			delete(s.bySandbox, sbx.UID)
		}
	}
}

// stale: a request forwarded to f's pod no longer reaches sbx's VM
// (nil: the sandbox is gone). A state older than the one f was read at
// says nothing: the proxy may read a sandbox past a cache that is behind
// (settle), and the cache then delivers the states in between.
func stale(f inFlight, sbx *sandlotv1.Sandbox) bool {
	if sbx == nil {
		return true
	}
	if notNewer(sbx.ResourceVersion, f.version) {
		return false
	}
	return sbx.DeletionTimestamp != nil || sbx.Status.PodIP != f.podIP
}

// notNewer: resourceVersion a is b or older. Kubernetes calls them
// opaque; the API server's are etcd revisions, which grow, and one that
// is not a number is taken as newer (the pod check then decides).
func notNewer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x <= y
}

// cut cancels the requests of uid that sbx (its latest state, nil when
// deleted) makes stale, and returns how many.
func (s *streams) cut(uid types.UID, sbx *sandlotv1.Sandbox) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, f := range s.bySandbox[uid] {
		if stale(f, sbx) {
			f.cancel()
			delete(s.bySandbox[uid], id)
			n++
		}
	}
	return n
}

// handler cuts streams on each change of a Sandbox in the cache.
func (s *streams) handler() toolscache.ResourceEventHandler {
	changed := func(obj any) {
		if sbx, ok := obj.(*sandlotv1.Sandbox); ok {
			proxyCut.Add(float64(s.cut(sbx.UID, sbx)))
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if sbx, ok := obj.(*sandlotv1.Sandbox); ok {
				proxyCut.Add(float64(s.cut(sbx.UID, nil)))
			}
		},
	}
}
