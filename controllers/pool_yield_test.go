package controllers

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func spare(name string, slot bool) sparePod {
	s := sparePod{demand: demand{MilliCPU: 1000, Memory: 512 << 20}, slot: slot}
	s.key.Namespace, s.key.Name = "ns", name
	return s
}

// TestYieldFor places a 1 CPU, 1 GiB sandbox on 2-CPU nodes with no room
// left but what pool pods hold.
func TestYieldFor(t *testing.T) {
	full := demand{MilliCPU: 2000, Memory: 2 << 30}
	twoSlots := []sparePod{spare("slot-1", true), spare("slot-2", true)}
	cases := []struct {
		name     string
		nodes    []corev1.Node
		spare    map[string][]sparePod
		src      dataSource
		wantNode string
		wantGive []string
	}{
		{name: "no pool pods: nothing gives way", nodes: []corev1.Node{testNode("a", "2", "4Gi")}},
		{name: "one slot is enough", nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]sparePod{"a": twoSlots}, wantNode: "a", wantGive: []string{"slot-1"}},
		{name: "more than a node's pool pods hold: none",
			nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]sparePod{"a": {{demand: demand{MilliCPU: 500, Memory: 1 << 20}}}}},
		{name: "the node with the data first, though it gives more",
			nodes: []corev1.Node{testNode("a", "2", "4Gi"), testNode("b", "2", "4Gi")},
			spare: map[string][]sparePod{"a": {{key: spare("a-small", true).key, demand: demand{MilliCPU: 500}},
				{key: spare("a-2", false).key, demand: demand{MilliCPU: 500}}},
				"b": {{key: spare("b-big", true).key, demand: demand{MilliCPU: 2000, Memory: 2 << 30}}}},
			src:      dataSource{Nodes: []string{"a"}, Remote: true},
			wantNode: "a", wantGive: []string{"a-small", "a-2"}},
		{name: "of equals, the fewest pods",
			nodes: []corev1.Node{testNode("a", "2", "4Gi"), testNode("b", "2", "4Gi")},
			spare: map[string][]sparePod{"a": {{key: spare("a-half", true).key, demand: demand{MilliCPU: 500}},
				{key: spare("a-2", true).key, demand: demand{MilliCPU: 500}}},
				"b": {spare("b-1", false)}},
			wantNode: "b", wantGive: []string{"b-1"}},
		{name: "fewest, not the first that fit: a small pod sorted first stays",
			nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]sparePod{"a": {{key: spare("a-small", true).key, demand: demand{MilliCPU: 500}},
				{key: spare("b-big", true).key, demand: demand{MilliCPU: 2000, Memory: 2 << 30}}}},
			wantNode: "a", wantGive: []string{"b-big"}},
		{name: "a pod going already is kept in the give (its room is on its way)",
			nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]sparePod{"a": {{key: spare("a-going", true).key, demand: demand{MilliCPU: 500}, going: true},
				{key: spare("b-big", true).key, demand: demand{MilliCPU: 2000, Memory: 2 << 30}}}},
			wantNode: "a", wantGive: []string{"a-going", "b-big"}},
		{name: "a not-ready node's pool pods stay",
			nodes: []corev1.Node{testNode("a", "2", "4Gi", notReady)},
			spare: map[string][]sparePod{"a": twoSlots}},
		{name: "local data elsewhere: no node may run it",
			nodes: []corev1.Node{testNode("a", "2", "4Gi")},
			spare: map[string][]sparePod{"a": twoSlots}, src: dataSource{Nodes: []string{"z"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			used := map[string]demand{}
			for _, n := range tc.nodes {
				used[n.Name] = full
			}
			req := placementRequest{Nodes: tc.nodes, Used: used, Demand: demand{MilliCPU: 1000, Memory: 1 << 30}, Source: tc.src}
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
			for _, s := range y.give {
				give = append(give, s.key.Name)
			}
			if y.node != tc.wantNode || !reflect.DeepEqual(give, tc.wantGive) {
				t.Fatalf("yield %s %v, want %s %v", y.node, give, tc.wantNode, tc.wantGive)
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
		order = append(order, s.key.Name)
	}
	if !reflect.DeepEqual(order, []string{"zz-going", "z-slot", "a-warm"}) || !got[0].going || !got[1].slot || got[2].slot || got[2].going {
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
	var none *roomHolds
	if none.hold("n", a, time.Now()) || none.held("n", time.Now()) {
		t.Fatal("a nil roomHolds held a node")
	}
	h := &roomHolds{}
	now := time.Now()
	if !h.hold("n", a, now) || !h.hold("n", b, now.Add(10*time.Second)) {
		t.Fatal("a first hold does not last")
	}
	if !h.held("n", now) || h.held("m", now) {
		t.Fatal("held: want n, not m")
	}
	h.release("n", b)
	if !h.held("n", now.Add(time.Second)) {
		t.Fatal("b's release lifted a's hold")
	}
	if h.hold("n", a, now.Add(roomHold)) || h.held("n", now.Add(roomHold)) {
		t.Fatal("a's hold was extended past roomHold")
	}
	if !h.hold("n", a, now.Add(roomHold+holdsForget+time.Second)) {
		t.Fatal("a hold older than holdsForget is not dropped (its start may hold again)")
	}
	h.release("n", a)
	if h.held("n", now) || len(h.since) != 0 {
		t.Fatalf("holds left after every release: %v", h.since)
	}
}

// TestPromisedPodsServeOneStart: two starts waiting on one full node give
// up different pool pods (the first's are promised to it while they go),
// and a placed start's promises go with its hold.
func TestPromisedPodsServeOneStart(t *testing.T) {
	a, b := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}
	slot1, slot2 := spare("slot-1", true), spare("slot-2", true)
	slot1.uid, slot2.uid = "u1", "u2"
	req := placementRequest{Nodes: []corev1.Node{testNode("n", "2", "4Gi")},
		Used: map[string]demand{"n": {MilliCPU: 2000, Memory: 2 << 30}}, Demand: demand{MilliCPU: 1000, Memory: 1 << 30}}
	all := map[string][]sparePod{"n": {slot1, slot2}}
	h, now := &roomHolds{}, time.Now()
	give := func(start types.NamespacedName) string {
		y := yieldFor(req, h.unpromised(all, start, now))
		if y == nil {
			return ""
		}
		h.promise(start, y.give, now)
		return y.give[0].key.Name
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
	h.release("n", a)
	if got := yieldFor(req, h.unpromised(all, types.NamespacedName{Name: "c"}, now)); got == nil || got.give[0].key.Name != "slot-1" {
		t.Fatalf("a placed: slot-1 is promised to no one, yield %+v", got)
	}
	if got := h.unpromised(all, a, now.Add(roomHold)); len(got["n"]) != 2 {
		t.Fatalf("a promise outlived roomHold: %+v", got)
	}
}
