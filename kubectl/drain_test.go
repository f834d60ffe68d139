package kubectl

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestDrainFollowsTheMoves: drain cordons the node, prints each
// sandbox's move (the controller's part is played here) and ends once
// none is left on the node.
func TestDrainFollowsTheMoves(t *testing.T) {
	f, ns := setup(t)
	node := drainNode(t, f, ns)
	sbx := f.sandbox(t, ns, "box", nil)
	f.running(t, sbx, node, "10.0.0.2")
	run := f.start(ns, "drain", node, "--timeout", "1m")
	run.pending(t, 2*time.Second, "the sandbox moved")
	n := &corev1.Node{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("node %s not cordoned: %v", node, err)
	}
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) { s.Status.Phase, s.Status.NodeName = sandlotv1.SandboxRunning, "other-node" })
	res := run.wait(t, 30*time.Second)
	if res.err != nil || !strings.Contains(res.out, "sandbox/"+ns+"/box: Running on "+node) ||
		!strings.Contains(res.out, "node/"+node+": no sandbox left") {
		t.Fatalf("drain: %v\n%s%s", res.err, res.out, res.errOut)
	}
}

// TestDrainSaysWhatCannotMove: a sandbox that says it cannot move ends
// the drain with its reason.
func TestDrainSaysWhatCannotMove(t *testing.T) {
	f, ns := setup(t)
	node := drainNode(t, f, ns)
	sbx := f.sandbox(t, ns, "stuck", func(s *sandlotv1.Sandbox) {
		s.Annotations = map[string]string{sandlotv1.AnnotationMoveBlocked: "no other node can run it: n2: unschedulable"}
	})
	f.running(t, sbx, node, "10.0.0.3")
	f.fails(t, ns, []string{"drain", node, "--timeout", "20s"}, "1 sandboxes on "+node+" cannot move",
		ns+"/stuck: no other node can run it: n2: unschedulable")
}

// drainNode makes a node of the test's own.
func drainNode(t *testing.T, f *fixture, ns string) string {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node"}}
	if err := f.c.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.c.Delete(context.Background(), n) })
	return n.Name
}
