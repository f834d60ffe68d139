package admission

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestAgentHoldsOnlyItsNode plays a stolen agent token: node-a's agent
// (its pod's token names node-a) may write node-a's pods, Node, Sandbox
// status and Snapshots, and nothing on node-b, nor move its own objects
// to node-b; the agent's account with a token bound to no pod writes
// nothing.
func TestAgentHoldsOnlyItsNode(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	const word = "writes only objects on its node"
	onA, onB := agentObjects(t, e.Client, "node-a"), agentObjects(t, e.Client, "node-b")
	agentA := asAgentOn(t, "node-a")
	mark := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"probe":"1"}}}`))
	status := client.RawPatch(types.MergePatchType, []byte(`{"status":{"message":"ready"}}`))
	waitEnforced(t, "the policy refuses node-a's agent a pod on node-b", func() error {
		return agentA.Patch(ctx, onB.pod, mark)
	}, word)
	for name, err := range map[string]error{
		"node-b's Node":              agentA.Patch(ctx, onB.node, mark),
		"node-b's Sandbox status":    agentA.Status().Patch(ctx, onB.sandbox, status),
		"node-b's Snapshot":          addFinalizer(ctx, e.Client, agentA, onB.snapshot),
		"node-a's Sandbox to node-b": agentA.Status().Patch(ctx, onA.sandbox, client.RawPatch(types.MergePatchType, []byte(`{"status":{"nodeName":"node-b"}}`))),
	} {
		if err := refusedWith(err, word); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, err := range map[string]error{
		"its pod":            agentA.Patch(ctx, onA.pod, mark),
		"its Node":           agentA.Patch(ctx, onA.node, mark),
		"its Sandbox status": agentA.Status().Patch(ctx, onA.sandbox, status),
		"its Snapshot":       addFinalizer(ctx, e.Client, agentA, onA.snapshot),
	} {
		if err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
	if err := refusedWith(as(t, agentUser).Patch(ctx, onA.pod, mark), "token bound to its pod"); err != nil {
		t.Errorf("the agent's account without a pod-bound token: %v", err)
	}
}

// addFinalizer updates snap as the agent does (its data finalizer; RBAC
// gives it update, not patch), read fresh by admin.
func addFinalizer(ctx context.Context, admin, agent client.Client, snap *sandlotv1.Snapshot) error {
	cur := &sandlotv1.Snapshot{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(snap), cur); err != nil {
		return err
	}
	cur.Finalizers = append(cur.Finalizers, "sandlot.dev/probe")
	return agent.Update(ctx, cur)
}

// nodeObjects are an agent's objects on one node.
type nodeObjects struct {
	node     *corev1.Node
	pod      *corev1.Pod
	sandbox  *sandlotv1.Sandbox
	snapshot *sandlotv1.Snapshot
}

// agentObjects makes (as the admin, as the controller and the scheduler
// would) a Node, a pod, a placed Sandbox and a Snapshot on node.
func agentObjects(t *testing.T, c client.Client, node string) nodeObjects {
	t.Helper()
	ctx := context.Background()
	o := nodeObjects{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}}
	o.pod = podOf(nil, nil, false)
	o.pod.Spec.NodeName = node
	o.sandbox = &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "sbx-", Namespace: tenantNS},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "python"}}}
	o.snapshot = &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{GenerateName: "snap-", Namespace: tenantNS,
		Labels: map[string]string{sandlotv1.LabelNode: node}}, Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "x"}}}
	for _, obj := range []client.Object{o.node, o.pod, o.sandbox, o.snapshot} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %T on %s: %v", obj, node, err)
		}
	}
	o.sandbox.Status.NodeName = node
	if err := c.Status().Update(ctx, o.sandbox); err != nil {
		t.Fatalf("place the sandbox on %s: %v", node, err)
	}
	return o
}
