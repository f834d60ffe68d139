package sandbox

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestOwnWrites(t *testing.T) {
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	var w ownWrites
	w.wrote(a, "1", "2")
	w.wrote(b, "5", "5") // a conflict: nothing written
	for _, tc := range []struct {
		name  string
		key   types.NamespacedName
		cur   string
		stale bool
	}{
		{"the cache still holds the copy before the write", a, "1", true},
		{"no write of ours", b, "5", false},
		{"the cache caught up", a, "2", false},
		{"and stays caught up (the entry went)", a, "1", false},
	} {
		if got := w.stale(tc.key, tc.cur); got != tc.stale {
			t.Errorf("%s: stale = %v, want %v", tc.name, got, tc.stale)
		}
	}
	w.wrote(a, "2", "3")
	w.forget(a)
	if w.stale(a, "2") {
		t.Error("a forgotten object is still stale")
	}
}
