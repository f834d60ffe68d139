package placement

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// usagePod is a pod on node requesting cpu and mem; sandbox is its
// LabelSandbox value ("-": no such label).
func usagePod(ns, name, node, sandbox, cpu, mem string, phase corev1.PodPhase) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{container(cpu, mem)}},
		Status: corev1.PodStatus{Phase: phase}}
	if sandbox != "-" {
		p.Labels = map[string]string{sandlotv1.LabelSandbox: sandbox}
	}
	return p
}

func placedSandbox(ns, name, node, pod string, phase sandlotv1.SandboxPhase) sandlotv1.Sandbox {
	return sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status: sandlotv1.SandboxStatus{NodeName: node, PodName: pod, Phase: phase,
			Resources: &sandlotv1.Resources{VCPU: 1, MemoryMiB: 512}}}
}

// viaStatus is a sandbox counted by its status: 1 vCPU, 512 MiB, plus
// 100m and 96Mi.
var viaStatus = Demand{MilliCPU: 1100, Memory: 608 << 20}

// nodeUsageCases place sandbox ns/me.
var nodeUsageCases = []struct {
	name      string
	pods      []corev1.Pod
	sandboxes []sandlotv1.Sandbox
	want      map[string]Demand
	shown     []string // names in ns, or namespace/name
}{
	{name: "other workloads' pods, any namespace",
		pods: []corev1.Pod{usagePod("kube-system", "dns", "a", "-", "100m", "70Mi", corev1.PodRunning),
			usagePod("team", "db", "a", "-", "2", "4Gi", corev1.PodPending)},
		want: map[string]Demand{"a": {MilliCPU: 2100, Memory: (4096 + 70) << 20}}},
	{name: "terminated and unbound pods take nothing",
		pods: []corev1.Pod{usagePod("team", "done", "a", "-", "2", "4Gi", corev1.PodSucceeded),
			usagePod("team", "crashed", "a", "-", "2", "4Gi", corev1.PodFailed),
			usagePod("team", "unscheduled", "", "-", "2", "4Gi", corev1.PodPending)},
		want: map[string]Demand{}},
	{name: "an unclaimed pool pod counts",
		pods: []corev1.Pod{usagePod("ns", "python-pool-x", "a", "", "1", "512Mi", corev1.PodRunning)},
		want: map[string]Demand{"a": {MilliCPU: 1000, Memory: 512 << 20}}},
	{name: "a sandbox with its pod counts once, by the pod",
		pods:      []corev1.Pod{usagePod("ns", "s1", "a", "s1", "1", "700Mi", corev1.PodRunning)},
		sandboxes: []sandlotv1.Sandbox{placedSandbox("ns", "s1", "a", "s1", sandlotv1.SandboxRunning)},
		want:      map[string]Demand{"a": {MilliCPU: 1000, Memory: 700 << 20}}, shown: []string{"s1"}},
	{name: "a claimed pool pod whose label lags counts once",
		pods:      []corev1.Pod{usagePod("ns", "python-pool-x", "a", "", "1", "700Mi", corev1.PodRunning)},
		sandboxes: []sandlotv1.Sandbox{placedSandbox("ns", "s1", "a", "python-pool-x", sandlotv1.SandboxStarting)},
		want:      map[string]Demand{"a": {MilliCPU: 1000, Memory: 700 << 20}}, shown: []string{"s1"}},
	{name: "a sandbox whose pod is not visible yet counts by its status",
		sandboxes: []sandlotv1.Sandbox{placedSandbox("ns", "s1", "a", "s1", sandlotv1.SandboxStarting)},
		want:      map[string]Demand{"a": viaStatus}, shown: []string{"s1"}},
	{name: "the same name in another namespace is another sandbox",
		pods:      []corev1.Pod{usagePod("other", "s1", "a", "s1", "1", "700Mi", corev1.PodRunning)},
		sandboxes: []sandlotv1.Sandbox{placedSandbox("ns", "s1", "a", "s1", sandlotv1.SandboxStarting)},
		want:      map[string]Demand{"a": viaStatus.Add(Demand{MilliCPU: 1000, Memory: 700 << 20})}, shown: []string{"s1", "other/s1"}},
	{name: "paused and terminal sandboxes without pods take nothing",
		sandboxes: []sandlotv1.Sandbox{placedSandbox("ns", "p", "a", "p", sandlotv1.SandboxPaused),
			placedSandbox("ns", "f", "a", "f", sandlotv1.SandboxFailed)},
		want: map[string]Demand{}},
	{name: "the sandbox being placed is left out",
		pods:      []corev1.Pod{usagePod("ns", "me", "a", "me", "1", "512Mi", corev1.PodRunning)},
		sandboxes: []sandlotv1.Sandbox{placedSandbox("ns", "me", "a", "me", sandlotv1.SandboxStarting)},
		want:      map[string]Demand{}},
}

func TestNodeUsage(t *testing.T) {
	self := types.NamespacedName{Namespace: "ns", Name: "me"}
	for _, tc := range nodeUsageCases {
		t.Run(tc.name, func(t *testing.T) {
			used, shown := nodeUsage(tc.pods, tc.sandboxes, self, func(r sandlotv1.Resources) Demand {
				return Demand{MilliCPU: int64(r.VCPU)*1000 + 100, Memory: int64(r.MemoryMiB+96) << 20}
			})
			if !reflect.DeepEqual(used, tc.want) {
				t.Errorf("used = %+v, want %+v", used, tc.want)
			}
			want := map[types.NamespacedName]bool{}
			for _, n := range tc.shown {
				key := types.NamespacedName{Namespace: "ns", Name: n}
				if ns, name, ok := strings.Cut(n, "/"); ok {
					key = types.NamespacedName{Namespace: ns, Name: name}
				}
				want[key] = true
			}
			if !reflect.DeepEqual(shown, want) {
				t.Errorf("shown = %v, want %v", shown, want)
			}
		})
	}
}

func TestStripPodKeepsWhatUsageReads(t *testing.T) {
	init := sidecar("100m", "64Mi")
	init.Image, init.Env = "proxy", []corev1.EnvVar{{Name: "A", Value: "b"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s1", UID: "u", ResourceVersion: "7",
			Labels:      map[string]string{sandlotv1.LabelSandbox: "s1", sandlotv1.LabelNode: "a", "app": "x"},
			Annotations: map[string]string{"big": "annotation"}},
		Spec: corev1.PodSpec{NodeName: "a", InitContainers: []corev1.Container{init},
			Containers: []corev1.Container{container("1", "512Mi")},
			Overhead:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("96Mi")},
			Volumes:    []corev1.Volume{{Name: "v"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
	got, err := stripPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	s := got.(*corev1.Pod)
	if s.Name != "s1" || s.Namespace != "ns" || s.Spec.NodeName != "a" || s.Status.Phase != corev1.PodRunning ||
		!reflect.DeepEqual(s.Labels, map[string]string{sandlotv1.LabelSandbox: "s1"}) {
		t.Fatalf("stripped pod = %+v", s)
	}
	if s.Annotations != nil || s.Spec.Volumes != nil || s.Status.PodIP != "" || s.Spec.InitContainers[0].Image != "" ||
		s.Spec.InitContainers[0].Env != nil {
		t.Fatalf("stripped pod kept more than usage reads: %+v", s)
	}
	if PodDemand(&s.Spec) != PodDemand(&pod.Spec) {
		t.Fatalf("demand %+v, want %+v", PodDemand(&s.Spec), PodDemand(&pod.Spec))
	}
	again, _ := stripPod(s)
	if !reflect.DeepEqual(again, s) {
		t.Fatalf("not idempotent: %+v", again)
	}
}
