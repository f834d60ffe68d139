package scale

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// agentFieldManager is the real node agent's (nodeagent.FieldManager):
// the controller tells the agent's conditions apart by it.
const agentFieldManager = "sandlot-agent"

// agent answers for the fleet's VMs as the node agent does: VMReady once
// a sandbox's pod runs (after carrying out a pool claim), and Snapshots
// and pause packages Ready on their node. Its work comes from each node's
// agent cache (Fleet.AgentCaches); it reads the fleet's shared cache.
type agent struct{ f *Fleet }

func (a *agent) start(ctx context.Context) error {
	if err := a.f.agentQueue(ctx, &corev1.Pod{}, a.pod); err != nil {
		return err
	}
	if err := a.f.agentQueue(ctx, &sandlotv1.Sandbox{}, a.sandbox); err != nil {
		return err
	}
	if err := a.f.agentQueue(ctx, &sandlotv1.Snapshot{}, a.snapshot); err != nil {
		return err
	}
	return a.f.agentQueue(ctx, &sandlotv1.PausedSandbox{}, a.paused)
}

// sandbox hands a sandbox's change (a new generation: a resume, a claim)
// to its pod.
func (a *agent) sandbox(ctx context.Context, r client.Reader, node string, key client.ObjectKey) (time.Duration, error) {
	sbx := &sandlotv1.Sandbox{}
	if err := r.Get(ctx, key, sbx); err != nil || sbx.Status.PodName == "" {
		return 0, client.IgnoreNotFound(err)
	}
	return a.pod(ctx, r, node, client.ObjectKey{Namespace: key.Namespace, Name: sbx.Status.PodName})
}

// pod reports VMReady for the sandbox a running pod holds.
func (a *agent) pod(ctx context.Context, r client.Reader, node string, key client.ObjectKey) (time.Duration, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, key, pod); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	name := pod.Labels[sandlotv1.LabelSandbox]
	if name == "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || !onNode(node, pod.Spec.NodeName) {
		return 0, nil
	}
	sbx := &sandlotv1.Sandbox{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, sbx); err != nil {
		return time.Second, client.IgnoreNotFound(err) // a new sandbox the cache does not hold yet
	}
	if sbx.Status.PodName != pod.Name {
		return 0, nil
	}
	c := meta.FindStatusCondition(sbx.Status.Conditions, sandlotv1.ConditionVMReady)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != sbx.Generation {
		if err := applyVMReady(ctx, a.f.c, sbx); err != nil {
			return 0, err
		}
	}
	if !sandlotv1.ClaimPending(pod.Annotations) {
		return 0, nil
	}
	orig := pod.DeepCopy()
	pod.Annotations[sandlotv1.AnnotationClaimActivated] = pod.Annotations[sandlotv1.AnnotationClaim]
	return 0, client.IgnoreNotFound(a.f.c.Patch(ctx, pod, client.MergeFrom(orig)))
}

// applyVMReady writes the agent's condition alone, as the real agent does.
func applyVMReady(ctx context.Context, c client.Client, sbx *sandlotv1.Sandbox) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": sandlotv1.GroupVersion.String(), "kind": "Sandbox",
		"metadata": map[string]any{"name": sbx.Name, "namespace": sbx.Namespace},
		"status": map[string]any{"conditions": []any{map[string]any{"type": sandlotv1.ConditionVMReady, "status": "True",
			"reason": "VMRunning", "message": "the simulated VM runs", "observedGeneration": sbx.Generation,
			"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}}},
	}}
	return client.IgnoreNotFound(c.Status().Patch(ctx, u, client.Apply, client.FieldOwner(agentFieldManager), client.ForceOwnership))
}

// snapshot makes a Snapshot Ready on its node at once.
func (a *agent) snapshot(ctx context.Context, r client.Reader, node string, key client.ObjectKey) (time.Duration, error) {
	snap := &sandlotv1.Snapshot{}
	if err := r.Get(ctx, key, snap); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if !onNode(node, snap.Status.NodeName) {
		return 0, nil
	}
	return 0, a.ready(ctx, snap, &snap.Status.DataStatus, snap.Status.NodeName)
}

// paused makes a pause package Ready on its node at once.
func (a *agent) paused(ctx context.Context, r client.Reader, node string, key client.ObjectKey) (time.Duration, error) {
	p := &sandlotv1.PausedSandbox{}
	if err := r.Get(ctx, key, p); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if !onNode(node, p.Spec.NodeName) {
		return 0, nil
	}
	return 0, a.ready(ctx, p, &p.Status.DataStatus, p.Spec.NodeName)
}

func (a *agent) ready(ctx context.Context, obj client.Object, st *sandlotv1.DataStatus, node string) error {
	if node == "" || obj.GetDeletionTimestamp() != nil || st.Phase == sandlotv1.DataReady || st.Phase == sandlotv1.DataFailed {
		return nil
	}
	now := metav1.Now()
	st.NodeName, st.Phase, st.Location = node, sandlotv1.DataReady, "sim://"+obj.GetNamespace()+"/"+obj.GetName()
	st.RemoteStatus, st.CompletionTime, st.ObservedGeneration = sandlotv1.RemoteNotApplicable, &now, obj.GetGeneration()
	st.TotalBytes = 256 << 20
	return client.IgnoreNotFound(a.f.c.Status().Update(ctx, obj))
}

// onNode reports whether an object on objNode is agent node's to handle
// (node "": the whole fleet's agent).
func onNode(node, objNode string) bool { return node == "" || node == objNode }
