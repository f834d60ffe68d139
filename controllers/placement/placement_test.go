package placement

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
func tainted(key, value string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}
func labelled(key, value string) nodeOpt {
	return func(n *corev1.Node) { n.Labels[key] = value }
}

// placeCase places a 1 CPU, 1 GiB sandbox.
type placeCase struct {
	name       string
	nodes      []corev1.Node
	used       map[string]Demand
	src        DataSource
	cons       Constraints
	wantNode   string
	wantReason string
	wantMsg    string
}

func runPlaceCases(t *testing.T, cases []placeCase) {
	t.Helper()
	oneGiB := Demand{MilliCPU: 1000, Memory: 1 << 30}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := place(Request{Nodes: tc.nodes, Used: tc.used, Demand: oneGiB, Source: tc.src, Constraints: tc.cons})
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

func TestPlace(t *testing.T) {
	runPlaceCases(t, []placeCase{
		{name: "no nodes", wantReason: sandlotv1.ReasonNoEligibleNode, wantMsg: "no node is labelled"},
		{name: "most free memory wins", nodes: []corev1.Node{testNode("a", "4", "4Gi"), testNode("b", "4", "8Gi")}, wantNode: "b"},
		{name: "ties go by name", nodes: []corev1.Node{testNode("b", "4", "4Gi"), testNode("a", "4", "4Gi")}, wantNode: "a"},
		{name: "used memory counts", nodes: []corev1.Node{testNode("a", "4", "4Gi"), testNode("b", "4", "8Gi")},
			used: map[string]Demand{"b": {Memory: 6 << 30}}, wantNode: "a"},
		{name: "cpu full", nodes: []corev1.Node{testNode("a", "1", "4Gi")}, used: map[string]Demand{"a": {MilliCPU: 500}},
			wantReason: sandlotv1.ReasonInsufficientCapacity, wantMsg: "0/1 nodes are available: 1 insufficient cpu"},
		{name: "not ready, cordoned, unlabelled", nodes: []corev1.Node{testNode("a", "4", "4Gi", notReady),
			testNode("b", "4", "4Gi", cordoned), testNode("c", "4", "4Gi", unlabelled)},
			wantReason: sandlotv1.ReasonNoEligibleNode, wantMsg: "1 not ready, 1 unschedulable"},
		{name: "snapshot's node preferred over emptier", nodes: []corev1.Node{testNode("a", "4", "2Gi"), testNode("b", "4", "64Gi")},
			src: DataSource{Nodes: []string{"a"}, Remote: true}, wantNode: "a"},
		{name: "snapshot's node full, data remote ready", nodes: []corev1.Node{testNode("a", "4", "2Gi"), testNode("b", "4", "4Gi")},
			used: map[string]Demand{"a": {Memory: 2 << 30}}, src: DataSource{Nodes: []string{"a"}, Remote: true}, wantNode: "b"},
		{name: "snapshot's node full, data local only", nodes: []corev1.Node{testNode("a", "4", "2Gi"), testNode("b", "4", "4Gi")},
			used: map[string]Demand{"a": {Memory: 2 << 30}}, src: DataSource{Nodes: []string{"a"}},
			wantReason: sandlotv1.ReasonNoEligibleNode, wantMsg: "1 source data is local to a"},
		{name: "remote data needs a compatible node", nodes: []corev1.Node{testNode("b", "4", "4Gi", fingerprint("x")),
			testNode("c", "4", "4Gi", fingerprint("y"))}, src: DataSource{Nodes: []string{"gone"}, Remote: true, Fingerprint: "y"}, wantNode: "c"},
		{name: "bases on two nodes: the emptier of them", nodes: []corev1.Node{testNode("a", "4", "4Gi"), testNode("b", "4", "8Gi"),
			testNode("c", "4", "64Gi")}, src: DataSource{Nodes: []string{"a", "b"}}, wantNode: "b"},
		{name: "a build pinned to its node", nodes: []corev1.Node{testNode("a", "4", "4Gi"), testNode("b", "4", "64Gi")},
			src: DataSource{Nodes: []string{"a"}}, wantNode: "a"},
	})
}

func TestPlaceHonoursTaintsAndSelector(t *testing.T) {
	runPlaceCases(t, []placeCase{
		{name: "untolerated taint skipped", nodes: []corev1.Node{testNode("a", "4", "4Gi"),
			testNode("b", "4", "64Gi", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule))}, wantNode: "a"},
		{name: "only tainted nodes", nodes: []corev1.Node{testNode("a", "4", "4Gi", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
			testNode("b", "4", "4Gi", tainted("evict", "", corev1.TaintEffectNoExecute))}, wantReason: sandlotv1.ReasonNoEligibleNode,
			wantMsg: "0/2 nodes are available: 1 untolerated taint dedicated=gpu:NoSchedule, 1 untolerated taint evict:NoExecute"},
		{name: "tolerated taint", nodes: []corev1.Node{testNode("a", "4", "4Gi"),
			testNode("b", "4", "64Gi", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule))},
			cons: Constraints{Tolerations: []corev1.Toleration{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}}, wantNode: "b"},
		{name: "PreferNoSchedule is no bar", nodes: []corev1.Node{testNode("a", "4", "4Gi"),
			testNode("b", "4", "64Gi", tainted("spot", "", corev1.TaintEffectPreferNoSchedule))}, wantNode: "b"},
		{name: "node selector", nodes: []corev1.Node{testNode("a", "4", "4Gi", labelled("pool", "vm")), testNode("b", "4", "64Gi")},
			cons: Constraints{NodeSelector: map[string]string{"pool": "vm"}}, wantNode: "a"},
		{name: "node selector matches none", nodes: []corev1.Node{testNode("a", "4", "4Gi", labelled("pool", "other"))},
			cons: Constraints{NodeSelector: map[string]string{"pool": "vm"}}, wantReason: sandlotv1.ReasonNoEligibleNode,
			wantMsg: "0/1 nodes are available: 1 not matching the pod's node selector"},
		{name: "data only on a tainted node", nodes: []corev1.Node{testNode("a", "4", "4Gi", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
			testNode("b", "4", "4Gi")}, src: DataSource{Nodes: []string{"a"}}, wantReason: sandlotv1.ReasonNoEligibleNode,
			wantMsg: "1 source data is local to a, 1 untolerated taint dedicated=gpu:NoSchedule"},
		{name: "the RuntimeClass's selector and tolerations count too", nodes: []corev1.Node{
			testNode("a", "4", "4Gi", labelled("pool", "vm"), labelled("kvm", "true")),
			testNode("b", "4", "64Gi", labelled("pool", "vm"), labelled("kvm", "true"), tainted("sandlot", "", corev1.TaintEffectNoSchedule)),
			testNode("c", "4", "64Gi", labelled("pool", "vm"))},
			cons: Constraints{NodeSelector: map[string]string{"pool": "vm"}}.And(Constraints{
				Tolerations:  []corev1.Toleration{{Key: "sandlot", Operator: corev1.TolerationOpExists}},
				NodeSelector: map[string]string{"kvm": "true"}}),
			wantNode: "b"},
	})
}

func TestConstraintsAnd(t *testing.T) {
	tpl := Constraints{Tolerations: []corev1.Toleration{{Key: "a", Operator: corev1.TolerationOpExists}},
		NodeSelector: map[string]string{"zone": "z1"}}
	class := Constraints{Tolerations: []corev1.Toleration{{Key: "b", Operator: corev1.TolerationOpExists}},
		NodeSelector: map[string]string{"sandlot.dev/runtime": "true"}}
	both := tpl.And(class)
	if len(both.Tolerations) != 2 || len(both.NodeSelector) != 2 || both.NodeSelector["zone"] != "z1" {
		t.Fatalf("and = %+v", both)
	}
	if len(tpl.NodeSelector) != 1 || len(class.NodeSelector) != 1 {
		t.Fatalf("and changed its operands: %+v, %+v", tpl, class)
	}
	if none := (Constraints{}).And(Constraints{}); none.NodeSelector != nil || none.Tolerations != nil {
		t.Fatalf("and of nothing = %+v", none)
	}
}

func TestDemandOfCountsOverhead(t *testing.T) {
	overhead := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("96Mi")}
	d := DemandOf(sandlotv1.Resources{VCPU: 2, MemoryMiB: 512}, overhead, 1000)
	if d.MilliCPU != 2100 || d.Memory != (512+96)<<20 {
		t.Fatalf("demand = %+v", d)
	}
	// Overcommitted CPU: a quarter core per vCPU.
	if d := DemandOf(sandlotv1.Resources{VCPU: 2, MemoryMiB: 512}, overhead, 250); d.MilliCPU != 600 {
		t.Fatalf("demand at 250m per vCPU = %+v", d)
	}
}

func TestConstraintsExclude(t *testing.T) {
	gpu := tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule)
	cases := []struct {
		name string
		node corev1.Node
		cons Constraints
		want string
	}{
		{name: "no taints, no selector", node: testNode("a", "1", "1Gi")},
		{name: "untolerated", node: testNode("a", "1", "1Gi", gpu), want: "untolerated taint dedicated=gpu:NoSchedule"},
		{name: "Equal", node: testNode("a", "1", "1Gi", gpu),
			cons: Constraints{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu"}}}},
		{name: "Equal, other value", node: testNode("a", "1", "1Gi", gpu),
			cons: Constraints{Tolerations: []corev1.Toleration{{Key: "dedicated", Value: "cpu"}}}, want: "untolerated taint dedicated=gpu:NoSchedule"},
		{name: "Exists on the key", node: testNode("a", "1", "1Gi", gpu),
			cons: Constraints{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}}},
		{name: "Exists on everything", node: testNode("a", "1", "1Gi", gpu, tainted("x", "", corev1.TaintEffectNoExecute)),
			cons: Constraints{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}},
		{name: "other effect", node: testNode("a", "1", "1Gi", tainted("x", "", corev1.TaintEffectNoExecute)),
			cons: Constraints{Tolerations: []corev1.Toleration{{Key: "x", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}},
			want: "untolerated taint x:NoExecute"},
		{name: "one of two tolerated", node: testNode("a", "1", "1Gi", gpu, tainted("x", "", corev1.TaintEffectNoExecute)),
			cons: Constraints{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}},
			want: "untolerated taint x:NoExecute"},
		{name: "Gt", node: testNode("a", "1", "1Gi", tainted("gen", "5", corev1.TaintEffectNoSchedule)),
			cons: Constraints{Tolerations: []corev1.Toleration{{Key: "gen", Operator: corev1.TolerationOpGt, Value: "3"}}}},
		{name: "selector matches", node: testNode("a", "1", "1Gi", labelled("zone", "z1"), labelled("kvm", "true")),
			cons: Constraints{NodeSelector: map[string]string{"zone": "z1", "kvm": "true"}}},
		{name: "selector needs every label", node: testNode("a", "1", "1Gi", labelled("zone", "z1")),
			cons: Constraints{NodeSelector: map[string]string{"zone": "z1", "kvm": "true"}}, want: "not matching the pod's node selector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cons.excludes(&tc.node); got != tc.want {
				t.Fatalf("excludes = %q, want %q", got, tc.want)
			}
		})
	}
}

// Readiness is reported before taints: a not-ready node carries the
// not-ready taint, and "not ready" says more.
func TestIneligibleNotReadyBeforeTaints(t *testing.T) {
	n := testNode("a", "1", "1Gi", notReady, tainted(corev1.TaintNodeNotReady, "", corev1.TaintEffectNoSchedule))
	if got := Ineligible(&n); got != "not ready" {
		t.Fatalf("ineligible = %q", got)
	}
}

func container(cpu, mem string) corev1.Container {
	return corev1.Container{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}
}

func sidecar(cpu, mem string) corev1.Container {
	c := container(cpu, mem)
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return c
}

func TestPodDemand(t *testing.T) {
	overhead := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("96Mi")}
	cases := []struct {
		name string
		spec corev1.PodSpec
		want Demand
	}{
		{name: "nothing requested", spec: corev1.PodSpec{Containers: []corev1.Container{{}}}},
		{name: "containers sum", spec: corev1.PodSpec{Containers: []corev1.Container{container("500m", "1Gi"), container("250m", "512Mi")}},
			want: Demand{MilliCPU: 750, Memory: 1536 << 20}},
		{name: "overhead added", spec: corev1.PodSpec{Containers: []corev1.Container{container("1", "512Mi")}, Overhead: overhead},
			want: Demand{MilliCPU: 1100, Memory: 608 << 20}},
		{name: "a bigger init container wins, per resource",
			spec: corev1.PodSpec{InitContainers: []corev1.Container{container("2", "128Mi"), container("100m", "256Mi")},
				Containers: []corev1.Container{container("500m", "1Gi")}},
			want: Demand{MilliCPU: 2000, Memory: 1 << 30}},
		{name: "sidecars run with the containers and later init containers",
			spec: corev1.PodSpec{InitContainers: []corev1.Container{sidecar("100m", "64Mi"), container("1", "1Gi")},
				Containers: []corev1.Container{container("500m", "256Mi")}},
			want: Demand{MilliCPU: 1100, Memory: (1024 + 64) << 20}},
		{name: "pod-level requests win", spec: corev1.PodSpec{Containers: []corev1.Container{container("500m", "256Mi")},
			Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}},
			Overhead:  overhead},
			want: Demand{MilliCPU: 600, Memory: (2048 + 96) << 20}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodDemand(&tc.spec); got != tc.want {
				t.Fatalf("podDemand = %+v, want %+v", got, tc.want)
			}
		})
	}
}
