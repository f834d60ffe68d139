package controllers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

type nodeOpt func(*corev1.Node)

func testNode(name, cpu, mem string, opts ...nodeOpt) corev1.Node {
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{sandlotv1.LabelRuntime: "true"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func notReady(n *corev1.Node)   { n.Status.Conditions[0].Status = corev1.ConditionFalse }
func cordoned(n *corev1.Node)   { n.Spec.Unschedulable = true }
func unlabelled(n *corev1.Node) { delete(n.Labels, sandlotv1.LabelRuntime) }
func fingerprint(fp string) nodeOpt {
	return func(n *corev1.Node) { n.Labels[sandlotv1.LabelFingerprint] = fp }
}

func TestPlace(t *testing.T) {
	oneGiB := demand{MilliCPU: 1000, Memory: 1 << 30}
	cases := []struct {
		name       string
		nodes      []corev1.Node
		used       map[string]demand
		src        dataSource
		wantNode   string
		wantReason string
		wantMsg    string
	}{
		{name: "no nodes", wantReason: sandlotv1.ReasonNoEligibleNode, wantMsg: "no node is labelled"},
		{name: "most free memory wins", nodes: []corev1.Node{testNode("a", "4", "4Gi"), testNode("b", "4", "8Gi")}, wantNode: "b"},
		{name: "ties go by name", nodes: []corev1.Node{testNode("b", "4", "4Gi"), testNode("a", "4", "4Gi")}, wantNode: "a"},
		{name: "used memory counts", nodes: []corev1.Node{testNode("a", "4", "4Gi"), testNode("b", "4", "8Gi")},
			used: map[string]demand{"b": {Memory: 6 << 30}}, wantNode: "a"},
		{name: "cpu full", nodes: []corev1.Node{testNode("a", "1", "4Gi")}, used: map[string]demand{"a": {MilliCPU: 500}},
			wantReason: sandlotv1.ReasonInsufficientCapacity, wantMsg: "0/1 nodes are available: 1 insufficient cpu"},
		{name: "not ready, cordoned, unlabelled", nodes: []corev1.Node{testNode("a", "4", "4Gi", notReady),
			testNode("b", "4", "4Gi", cordoned), testNode("c", "4", "4Gi", unlabelled)},
			wantReason: sandlotv1.ReasonNoEligibleNode, wantMsg: "1 not ready, 1 unschedulable"},
		{name: "snapshot's node preferred over emptier", nodes: []corev1.Node{testNode("a", "4", "2Gi"), testNode("b", "4", "64Gi")},
			src: dataSource{Nodes: []string{"a"}, Remote: true}, wantNode: "a"},
		{name: "snapshot's node full, data remote ready", nodes: []corev1.Node{testNode("a", "4", "2Gi"), testNode("b", "4", "4Gi")},
			used: map[string]demand{"a": {Memory: 2 << 30}}, src: dataSource{Nodes: []string{"a"}, Remote: true}, wantNode: "b"},
		{name: "snapshot's node full, data local only", nodes: []corev1.Node{testNode("a", "4", "2Gi"), testNode("b", "4", "4Gi")},
			used: map[string]demand{"a": {Memory: 2 << 30}}, src: dataSource{Nodes: []string{"a"}},
			wantReason: sandlotv1.ReasonNoEligibleNode, wantMsg: "1 source data is local to a"},
		{name: "remote data needs a compatible node", nodes: []corev1.Node{testNode("b", "4", "4Gi", fingerprint("x")),
			testNode("c", "4", "4Gi", fingerprint("y"))}, src: dataSource{Nodes: []string{"gone"}, Remote: true, Fingerprint: "y"}, wantNode: "c"},
		{name: "bases on two nodes: the emptier of them", nodes: []corev1.Node{testNode("a", "4", "4Gi"), testNode("b", "4", "8Gi"),
			testNode("c", "4", "64Gi")}, src: dataSource{Nodes: []string{"a", "b"}}, wantNode: "b"},
		{name: "a build pinned to its node", nodes: []corev1.Node{testNode("a", "4", "4Gi"), testNode("b", "4", "64Gi")},
			src: dataSource{Nodes: []string{"a"}}, wantNode: "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := place(placementRequest{Nodes: tc.nodes, Used: tc.used, Demand: oneGiB, Source: tc.src})
			if p.Node != tc.wantNode {
				t.Fatalf("node = %q (%s: %s), want %q", p.Node, p.Reason, p.Message, tc.wantNode)
			}
			if tc.wantReason != "" && p.Reason != tc.wantReason {
				t.Errorf("reason = %q, want %q", p.Reason, tc.wantReason)
			}
			if !strings.Contains(p.Message, tc.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", p.Message, tc.wantMsg)
			}
		})
	}
}

func TestDemandOfCountsOverhead(t *testing.T) {
	overhead := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("96Mi")}
	d := demandOf(sandlotv1.Resources{VCPU: 2, MemoryMiB: 512}, overhead, 1000)
	if d.MilliCPU != 2100 || d.Memory != (512+96)<<20 {
		t.Fatalf("demand = %+v", d)
	}
	// Overcommitted CPU: a quarter core per vCPU.
	if d := demandOf(sandlotv1.Resources{VCPU: 2, MemoryMiB: 512}, overhead, 250); d.MilliCPU != 600 {
		t.Fatalf("demand at 250m per vCPU = %+v", d)
	}
}
