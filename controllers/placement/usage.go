package placement

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// A node's usage is counted as the scheduler counts it: the requests of
// every pod bound there and not terminated, whoever made it (other
// workloads, warm pool pods, sandboxes), plus the sandboxes placed whose
// pods are not visible yet (their status, then the assume cache).
//
// The pods come from a cache of their own, the pod usage view: the
// manager's cache holds only sandlot's pods, whole, for the reconcilers
// that own them, and it takes one ByObject entry per type, so it cannot
// also hold everyone else's pods in another shape. The view lists and
// watches all namespaces' pods that are bound and not terminated (a field
// selector: the API server filters, and a pod that ends leaves the view as
// a deletion) and keeps of each only what usage reads (stripPod).

// podUsageView is that cache. Its GetCache has the manager start it with
// its own caches and wait for its sync before the controllers run.
type podUsageView struct{ cache.Cache }

func (v podUsageView) GetCache() cache.Cache { return v.Cache }

// NewPodUsageView makes the view and registers it with the manager.
func NewPodUsageView(mgr ctrl.Manager) (client.Reader, error) {
	bound := fields.AndSelectors(fields.OneTermNotEqualSelector("spec.nodeName", ""),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)))
	c, err := cache.New(mgr.GetConfig(), cache.Options{HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(), ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Field: bound, Transform: stripPod}}})
	if err != nil {
		return nil, fmt.Errorf("pod usage cache: %w", err)
	}
	// Asked for now, the informer starts (and is waited for) with the cache.
	if _, err := c.GetInformer(context.Background(), &corev1.Pod{}); err != nil {
		return nil, fmt.Errorf("pod usage informer: %w", err)
	}
	if err := mgr.Add(podUsageView{c}); err != nil {
		return nil, fmt.Errorf("add pod usage cache: %w", err)
	}
	return c, nil
}

// stripPod keeps of a pod what usage reads: its key, whose sandbox it is
// (LabelSandbox, the only label kept; an unclaimed pool pod's boot
// annotation too), its node, phase, requests and whether it is being
// deleted. It is idempotent, as a transform must be.
func stripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp},
		Spec: corev1.PodSpec{NodeName: pod.Spec.NodeName, Overhead: pod.Spec.Overhead,
			Containers: stripContainers(pod.Spec.Containers), InitContainers: stripContainers(pod.Spec.InitContainers)},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	if v, ok := pod.Labels[sandlotv1.LabelSandbox]; ok {
		out.Labels = map[string]string{sandlotv1.LabelSandbox: v}
		if b, ok := pod.Annotations[sandlotv1.AnnotationBoot]; ok && v == "" { // a pool pod's kind (spareOf)
			out.Annotations = map[string]string{sandlotv1.AnnotationBoot: b}
		}
	}
	if r := pod.Spec.Resources; r != nil {
		out.Spec.Resources = &corev1.ResourceRequirements{Requests: r.Requests}
	}
	return out, nil
}

func stripContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		out[i] = corev1.Container{Name: cs[i].Name, RestartPolicy: cs[i].RestartPolicy,
			Resources: corev1.ResourceRequirements{Requests: cs[i].Resources.Requests}}
	}
	return out
}

// Requested is a resource list's CPU and memory.
func Requested(l corev1.ResourceList) Demand {
	return Demand{MilliCPU: l.Cpu().MilliValue(), Memory: l.Memory().Value()}
}

// PodDemand is what a pod takes from its node as the scheduler counts it:
// its containers' requests, or an init container's when more (sidecars,
// restartable init containers, run alongside both), pod-level requests
// instead where set, plus the pod's overhead. (A pod being resized in
// place counts at its spec, not the larger of spec and status.)
func PodDemand(spec *corev1.PodSpec) Demand {
	var sum, sidecars, init Demand
	for i := range spec.Containers {
		sum = sum.Add(Requested(spec.Containers[i].Resources.Requests))
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		d := Requested(c.Resources.Requests)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sum = sum.Add(d)
			sidecars = sidecars.Add(d)
			d = sidecars // with the sidecars started before it
		} else {
			d = d.Add(sidecars)
		}
		init = init.Max(d)
	}
	sum = sum.Max(init)
	if spec.Resources != nil {
		if q, ok := spec.Resources.Requests[corev1.ResourceCPU]; ok {
			sum.MilliCPU = q.MilliValue()
		}
		if q, ok := spec.Resources.Requests[corev1.ResourceMemory]; ok {
			sum.Memory = q.Value()
		}
	}
	return sum.Add(Requested(spec.Overhead))
}

// nodeUsage sums, per node, the pods' requests and, for each placed
// sandbox whose pod is not among them, what its status says it runs
// (sandboxDemand): a sandbox is counted once. self, the sandbox being
// placed, is left out. It also returns the sandboxes whose placement
// shows, by pod or status, for the assume cache to let go of.
func nodeUsage(pods []corev1.Pod, sandboxes []sandlotv1.Sandbox, self types.NamespacedName,
	sandboxDemand func(sandlotv1.Resources) Demand) (map[string]Demand, map[types.NamespacedName]bool) {
	used := map[string]Demand{}
	shown := map[types.NamespacedName]bool{}
	seen := map[types.NamespacedName]bool{}
	for i := range pods {
		p := &pods[i]
		owner, sandlot := p.Labels[sandlotv1.LabelSandbox]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed ||
			(sandlot && p.Namespace == self.Namespace && (owner == self.Name || p.Name == self.Name)) {
			continue
		}
		used[p.Spec.NodeName] = used[p.Spec.NodeName].Add(PodDemand(&p.Spec))
		seen[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = true
		if owner != "" {
			shown[types.NamespacedName{Namespace: p.Namespace, Name: owner}] = true
		}
	}
	for i := range sandboxes {
		s := &sandboxes[i]
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if key == self || !occupiesNode(s) {
			continue
		}
		if !shown[key] && !seen[types.NamespacedName{Namespace: s.Namespace, Name: s.Status.PodName}] {
			used[s.Status.NodeName] = used[s.Status.NodeName].Add(sandboxDemand(*s.Status.Resources))
		}
		shown[key] = true
	}
	return used, shown
}
