package placement

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func spare(name string, slot bool) Spare {
	s := Spare{Demand: Demand{MilliCPU: 1000, Memory: 512 << 20}, Slot: slot}
	s.Key.Namespace, s.Key.Name = "ns", name
	return s
}

// TestYieldFor places a 1 CPU, 1 GiB sandbox on 2-CPU nodes with no room
// left but what pool pods hold.
func TestYieldFor(t *testing.T) {
	full := Demand{MilliCPU: 2000, Memory: 2 << 30}
	twoSlots := []Spare{spare("slot-1", true), spare("slot-2", true)}
	cases := []struct {
		name     string
		nodes    []corev1.Node
		spare    map[string][]Spare
		src      DataSource
		wantNode string
		wantGive []string
	}{
		{name: "no pool pods: nothing gives way", nodes: []corev1.Node{testNode("a", "2", "4Gi")}},
		{name: "one slot is enough", nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]Spare{"a": twoSlots}, wantNode: "a", wantGive: []string{"slot-1"}},
		{name: "more than a node's pool pods hold: none",
			nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]Spare{"a": {{Demand: Demand{MilliCPU: 500, Memory: 1 << 20}}}}},
		{name: "the node with the data first, though it gives more",
			nodes: []corev1.Node{testNode("a", "2", "4Gi"), testNode("b", "2", "4Gi")},
			spare: map[string][]Spare{"a": {{Key: spare("a-small", true).Key, Demand: Demand{MilliCPU: 500}},
				{Key: spare("a-2", false).Key, Demand: Demand{MilliCPU: 500}}},
				"b": {{Key: spare("b-big", true).Key, Demand: Demand{MilliCPU: 2000, Memory: 2 << 30}}}},
			src:      DataSource{Nodes: []string{"a"}, Remote: true},
			wantNode: "a", wantGive: []string{"a-small", "a-2"}},
		{name: "of equals, the fewest pods",
			nodes: []corev1.Node{testNode("a", "2", "4Gi"), testNode("b", "2", "4Gi")},
			spare: map[string][]Spare{"a": {{Key: spare("a-half", true).Key, Demand: Demand{MilliCPU: 500}},
				{Key: spare("a-2", true).Key, Demand: Demand{MilliCPU: 500}}},
				"b": {spare("b-1", false)}},
			wantNode: "b", wantGive: []string{"b-1"}},
		{name: "fewest, not the first that fit: a small pod sorted first stays",
			nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]Spare{"a": {{Key: spare("a-small", true).Key, Demand: Demand{MilliCPU: 500}},
				{Key: spare("b-big", true).Key, Demand: Demand{MilliCPU: 2000, Memory: 2 << 30}}}},
			wantNode: "a", wantGive: []string{"b-big"}},
		{name: "a pod going already is kept in the give (its room is on its way)",
			nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]Spare{"a": {{Key: spare("a-going", true).Key, Demand: Demand{MilliCPU: 500}, Going: true},
				{Key: spare("b-big", true).Key, Demand: Demand{MilliCPU: 2000, Memory: 2 << 30}}}},
			wantNode: "a", wantGive: []string{"a-going", "b-big"}},
		{name: "a not-ready node's pool pods stay",
			nodes: []corev1.Node{testNode("a", "2", "4Gi", notReady)},
			spare: map[string][]Spare{"a": twoSlots}},
		{name: "local data elsewhere: no node may run it",
			nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]Spare{"a": twoSlots}, src: DataSource{Nodes: []string{"z"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			used := map[string]Demand{}
			for _, n := range tc.nodes {
				used[n.Name] = full
			}
			req := Request{Nodes: tc.nodes, Used: used, Demand: Demand{MilliCPU: 1000, Memory: 1 << 30}, Source: tc.src}
			if p := place(req); p.Node != "" {
				t.Fatalf("placed on %s without giving way: the case is wrong", p.Node)
			}
			y := yieldFor(req, tc.spare)
			if tc.wantNode == "" {
				if y != nil {
					t.Fatalf("yield %+v, want none", y)
				}
				return
			}
			var give []string
			for _, s := range y.Give {
				give = append(give, s.Key.Name)
			}
			if y.Node != tc.wantNode || !reflect.DeepEqual(give, tc.wantGive) {
				t.Fatalf("yield %s %v, want %s %v", y.Node, give, tc.wantNode, tc.wantGive)
			}
		})
	}
}

// TestSpareOf: unclaimed pool pods only (a claimed one, a sandbox's and
// another workload's pod stay): those being deleted first (their room
// comes without another delete), start slots before warm pods.
func TestSpareOf(t *testing.T) {
	slot := usagePod("ns", "z-slot", "a", "", "1", "512Mi", corev1.PodRunning)
	slot.Annotations = map[string]string{sandlotv1.AnnotationBoot: sandlotv1.BootSlot}
	pods := []corev1.Pod{
		usagePod("ns", "a-warm", "a", "", "1", "512Mi", corev1.PodRunning),
		slot,
		usagePod("ns", "claimed", "a", "s1", "1", "512Mi", corev1.PodRunning),
		usagePod("team", "db", "a", "-", "2", "4Gi", corev1.PodRunning),
	}
	deleted := usagePod("ns", "zz-going", "a", "", "1", "512Mi", corev1.PodRunning)
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	stripped, _ := stripPod(&deleted)
	got := spareOf(append(pods, *stripped.(*corev1.Pod)))["a"]
	var order []string
	for _, s := range got {
		order = append(order, s.Key.Name)
	}
	if !reflect.DeepEqual(order, []string{"zz-going", "z-slot", "a-warm"}) || !got[0].Going || !got[1].Slot || got[2].Slot || got[2].Going {
		t.Fatalf("spare = %+v, want zz-going (being deleted), z-slot, then a-warm", got)
	}
	stripped, _ = stripPod(&slot)
	if !sandlotv1.IsStartSlot(stripped.(*corev1.Pod).Annotations) {
		t.Fatalf("the usage view forgets a slot is one: %+v", stripped)
	}
}

// TestRoomHolds: each start's hold is its own (placing one releases
// only its), lasts roomHold from its first yield and is not extended.
func TestRoomHolds(t *testing.T) {
	a, b := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}
	var none *Holds
	if none.Hold("n", a, time.Now()) || none.Held("n", time.Now()) {
		t.Fatal("a nil roomHolds held a node")
	}
	h := &Holds{}
	now := time.Now()
	if !h.Hold("n", a, now) || !h.Hold("n", b, now.Add(10*time.Second)) {
		t.Fatal("a first hold does not last")
	}
	if !h.Held("n", now) || h.Held("m", now) {
		t.Fatal("held: want n, not m")
	}
	h.Release("n", b)
	if !h.Held("n", now.Add(time.Second)) {
		t.Fatal("b's release lifted a's hold")
	}
	if h.Hold("n", a, now.Add(roomHold)) || h.Held("n", now.Add(roomHold)) {
		t.Fatal("a's hold was extended past roomHold")
	}
	if !h.Hold("n", a, now.Add(roomHold+holdsForget+time.Second)) {
		t.Fatal("a hold older than holdsForget is not dropped (its start may hold again)")
	}
	h.Release("n", a)
	if h.Held("n", now) || len(h.since) != 0 {
		t.Fatalf("holds left after every release: %v", h.since)
	}
}

// TestPromisedPodsServeOneStart: two starts waiting on one full node give
// up different pool pods (the first's are promised to it while they go),
// and a placed start's promises go with its hold.
func TestPromisedPodsServeOneStart(t *testing.T) {
	a, b := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}
	slot1, slot2 := spare("slot-1", true), spare("slot-2", true)
	slot1.UID, slot2.UID = "u1", "u2"
	req := Request{Nodes: []corev1.Node{testNode("n", "2", "4Gi")},
		Used: map[string]Demand{"n": {MilliCPU: 2000, Memory: 2 << 30}}, Demand: Demand{MilliCPU: 1000, Memory: 1 << 30}}
	all := map[string][]Spare{"n": {slot1, slot2}}
	h, now := &Holds{}, time.Now()
	give := func(start types.NamespacedName) string {
		y := yieldFor(req, h.unpromised(all, start, now))
		if y == nil {
			return ""
		}
		h.promise(start, y.Give, now)
		return y.Give[0].Key.Name
	}
	if got := give(a); got != "slot-1" {
		t.Fatalf("a gives up %q, want slot-1", got)
	}
	if got := give(b); got != "slot-2" {
		t.Fatalf("b gives up %q, want slot-2 (slot-1 is a's)", got)
	}
	if got := give(a); got != "slot-1" {
		t.Fatalf("a's own promise: it gives up %q again, want slot-1", got)
	}
	h.Release("n", a)
	if got := yieldFor(req, h.unpromised(all, types.NamespacedName{Name: "c"}, now)); got == nil || got.Give[0].Key.Name != "slot-1" {
		t.Fatalf("a placed: slot-1 is promised to no one, yield %+v", got)
	}
	if got := h.unpromised(all, a, now.Add(roomHold)); len(got["n"]) != 2 {
		t.Fatalf("a promise outlived roomHold: %+v", got)
	}
}
