package nodeagent

import (
	"context"
	"fmt"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// networkPending: the pod's rules (the controller's annotation) are not
// the ones its shim was last told.
func networkPending(pod *corev1.Pod) bool {
	want, ok := pod.Annotations[sandlotv1.AnnotationNetwork]
	applied, done := pod.Annotations[sandlotv1.AnnotationNetworkApplied]
	return (ok || done) && want != applied
}

// syncNetwork tells the pod's shim its sandbox's rules (live, on the
// VM's tap) and who besides the node may connect to it (sandlot-api's
// pods and this agent's own pod), and records the rules as applied, which the controller shows in
// the Sandbox's status. The shim refuses rules it cannot enforce.
func (r *VMReadyReconciler) syncNetwork(ctx context.Context, c Control, pod *corev1.Pod) error {
	sources, err := r.ingressSources(ctx)
	if err != nil {
		return err
	}
	want := pod.Annotations[sandlotv1.AnnotationNetwork]
	key := want + "|" + strings.Join(sources, ",")
	if last, ok := r.pushed.get(pod); ok && last == key && !networkPending(pod) {
		return nil
	}
	if _, err := c.SetNetwork(ctx, &controlapi.SetNetworkRequest{NetworkJson: want, IngressFrom: sources}); err != nil {
		return fmt.Errorf("apply the network rules of pod %s: %w", pod.Name, err)
	}
	r.pushed.set(pod, key)
	if !networkPending(pod) {
		return nil
	}
	orig := pod.DeepCopy()
	pod.Annotations[sandlotv1.AnnotationNetworkApplied] = want
	if err := r.Patch(ctx, pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("record the network rules of pod %s as applied: %w", pod.Name, err)
	}
	return nil
}

// pushNetwork dials the pod's shim for syncNetwork.
func (r *VMReadyReconciler) pushNetwork(ctx context.Context, pod *corev1.Pod) error {
	c, err := r.dial(ctx, string(pod.UID))
	if err != nil {
		return fmt.Errorf("shim of pod %s: %w", pod.Name, err)
	}
	defer c.Close()
	return r.syncNetwork(ctx, c, pod)
}

// ingressSources are the addresses besides the node's that may open
// connections to this node's sandboxes: sandlot-api's pods and the
// agent's own pod (sorted).
func (r *VMReadyReconciler) ingressSources(ctx context.Context) ([]string, error) {
	out, err := r.apiSources(ctx)
	if err != nil {
		return nil, err
	}
	if r.PodIP != "" {
		out = append(out, r.PodIP)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// apiSources are the IPv4 addresses of sandlot-api's pods, from its
// Service's EndpointSlices (none without APIService).
func (r *VMReadyReconciler) apiSources(ctx context.Context) ([]string, error) {
	if r.APIService.Name == "" {
		return nil, nil
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := r.List(ctx, list, client.InNamespace(r.APIService.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: r.APIService.Name}); err != nil {
		return nil, fmt.Errorf("endpoints of %s: %w", r.APIService, err)
	}
	var out []string
	for _, sl := range list.Items {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range sl.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	return out, nil
}

// sandboxPods maps any change of sandlot-api's endpoints to every
// sandbox pod on this node (the agent's pod cache holds only those).
func (r *VMReadyReconciler) sandboxPods(ctx context.Context, _ client.Object) []reconcile.Request {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.HasLabels{sandlotv1.LabelSandbox}); err != nil {
		log.FromContext(ctx).Error(err, "list sandbox pods for an endpoint change")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pods.Items))
	for _, p := range pods.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return reqs
}
