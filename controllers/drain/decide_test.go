package drain

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	node := func(name string, cordoned bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	}
	sbx := func(phase sandlotv1.SandboxPhase, on string, annotations map[string]string) *sandlotv1.Sandbox {
		return &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Status: sandlotv1.SandboxStatus{Phase: phase, NodeName: on}}
	}
	from := func(n string) map[string]string { return map[string]string{sandlotv1.AnnotationMoveFrom: n} }
	paused := sbx(sandlotv1.SandboxRunning, "a", nil)
	paused.Spec.Paused = true
	cases := map[string]struct {
		w    world
		want marks
	}{
		"running, node schedulable":  {world{Sandbox: sbx(sandlotv1.SandboxRunning, "a", nil), Node: node("a", false), SharedStore: true}, marks{}},
		"running, node cordoned":     {world{Sandbox: sbx(sandlotv1.SandboxRunning, "a", nil), Node: node("a", true), SharedStore: true}, marks{MoveFrom: "a"}},
		"starting on a cordoned one": {world{Sandbox: sbx(sandlotv1.SandboxStarting, "a", nil), Node: node("a", true), SharedStore: true}, marks{}},
		"paused by its user":         {world{Sandbox: paused, Node: node("a", true), SharedStore: true}, marks{}},
		"local store": {world{Sandbox: sbx(sandlotv1.SandboxRunning, "a", nil), Node: node("a", true)},
			marks{Blocked: "the store is local: a paused sandbox resumes only on its own node (uncordon the node, or delete the sandbox)"}},
		"no other node": {world{Sandbox: sbx(sandlotv1.SandboxRunning, "a", nil), Node: node("a", true), SharedStore: true, Elsewhere: "b: unschedulable"},
			marks{Blocked: "no other node can run it: b: unschedulable"}},
		"a template builder": {world{Sandbox: sbx(sandlotv1.SandboxRunning, "a", map[string]string{sandlotv1.AnnotationBaseOf: "python"}),
			Node: node("a", true), SharedStore: true}, marks{Blocked: "a template builder: it leaves the node when its build ends"}},
		"moving: pausing":           {world{Sandbox: sbx(sandlotv1.SandboxPausing, "a", from("a")), Node: node("a", true), Origin: node("a", true)}, marks{MoveFrom: "a"}},
		"moving: paused":            {world{Sandbox: sbx(sandlotv1.SandboxPaused, "a", from("a")), Node: node("a", true), Origin: node("a", true)}, marks{MoveFrom: "a"}},
		"moving: resuming":          {world{Sandbox: sbx(sandlotv1.SandboxResuming, "b", from("a")), Node: node("b", false), Origin: node("a", true)}, marks{MoveFrom: "a"}},
		"moved: running elsewhere":  {world{Sandbox: sbx(sandlotv1.SandboxRunning, "b", from("a")), Node: node("b", false), Origin: node("a", true)}, marks{}},
		"uncordoned before a pause": {world{Sandbox: sbx(sandlotv1.SandboxRunning, "a", from("a")), Node: node("a", false), Origin: node("a", false)}, marks{}},
		"uncordoned while paused":   {world{Sandbox: sbx(sandlotv1.SandboxPaused, "a", from("a")), Node: node("a", false), Origin: node("a", false)}, marks{}},
		"uncordoned mid-pause":      {world{Sandbox: sbx(sandlotv1.SandboxPausing, "a", from("a")), Node: node("a", false), Origin: node("a", false)}, marks{MoveFrom: "a"}},
		"ended while moving":        {world{Sandbox: sbx(sandlotv1.SandboxFailed, "a", from("a")), Origin: node("a", true)}, marks{}},
	}
	for name, c := range cases {
		if got := decide(c.w); got != c.want {
			t.Errorf("%s: got %+v, want %+v", name, got, c.want)
		}
	}
}
