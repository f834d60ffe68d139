package template

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestBaseMemoForgetsOnEveryChange: a remembered read is served only while
// the template (its UID, generation and base snapshots) and its snapshots'
// epoch are the ones it was read at.
func TestBaseMemoForgetsOnEveryChange(t *testing.T) {
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t", UID: "u1", Generation: 1},
		Status: sandlotv1.TemplateStatus{BaseSnapshots: []sandlotv1.BaseSnapshot{{Node: "n1", Phase: sandlotv1.BaseReady, Snapshot: "s1"}}}}
	key := types.NamespacedName{Namespace: "ns", Name: "t"}
	read := ReadyBases{Nodes: []string{"n1"}}
	m := NewBaseMemo()
	remember := func() {
		_, epoch, _ := m.get(tpl)
		m.put(tpl, epoch, read)
	}
	cases := []struct {
		name   string
		change func()
		served bool
	}{
		{"nothing changed", func() {}, true},
		{"a snapshot of the template changed", func() { m.bump(key) }, false},
		{"another template's snapshot changed", func() { m.bump(types.NamespacedName{Namespace: "ns", Name: "other"}) }, true},
		{"the template's pool status changed", func() { tpl.Status.Pool = []sandlotv1.NodePool{{Node: "n1"}} }, true},
		{"a base snapshot's phase changed", func() { tpl.Status.BaseSnapshots[0].Phase = sandlotv1.BaseFailed }, false},
		{"a base snapshot was added", func() {
			tpl.Status.BaseSnapshots = append(tpl.Status.BaseSnapshots, sandlotv1.BaseSnapshot{Node: "n2", Snapshot: "s2"})
		}, false},
		{"the template's spec changed", func() { tpl.Generation++ }, false},
		{"the template was replaced", func() { tpl.UID = "u2" }, false},
		{"the template was deleted", func() { m.forget(key) }, false},
	}
	for _, c := range cases {
		remember()
		c.change()
		if _, _, ok := m.get(tpl); ok != c.served {
			t.Errorf("%s: served %v, want %v", c.name, ok, c.served)
		}
	}
	// A change between the epoch's read and the put leaves the entry stale.
	_, epoch, _ := m.get(tpl)
	m.bump(key)
	m.put(tpl, epoch, read)
	if _, _, ok := m.get(tpl); ok {
		t.Error("a read that missed a change was served")
	}
}
