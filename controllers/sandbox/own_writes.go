package sandbox

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ownWrites remembers, per object, the resourceVersion it had before the
// controller's last status write, until the cache shows a newer one. A
// reconcile of the older copy (woken by its pod's event before the
// write's own) would only patch against a stale version and be refused
// with a conflict: one wasted API server write per start at fleet size.
type ownWrites struct{ before sync.Map } // types.NamespacedName → string

// wrote records a write that moved key from resourceVersion before on.
func (w *ownWrites) wrote(key types.NamespacedName, before, after string) {
	if after != before {
		w.before.Store(key, before)
	}
}

// stale: the cached copy at resourceVersion cur predates our last write.
func (w *ownWrites) stale(key types.NamespacedName, cur string) bool {
	before, ok := w.before.Load(key)
	if !ok {
		return false
	}
	if before.(string) == cur {
		return true
	}
	w.before.CompareAndDelete(key, before)
	return false
}

// forget drops key (the object is gone).
func (w *ownWrites) forget(key types.NamespacedName) { w.before.Delete(key) }
