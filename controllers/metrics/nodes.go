package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/placement"
)

// The runtime nodes as the controller places on them, read from its cache
// at each scrape: what each offers and what sandlot's pods (sandboxes,
// warm pool pods, start slots, builders) request there, and each node's
// fingerprint (a remote snapshot restores only on nodes of its own).
var (
	nodeCapacityDesc = prometheus.NewDesc("sandlot_node_capacity", "Allocatable CPU (cores) and memory (bytes) of each "+
		"runtime node (labelled "+sandlotv1.LabelRuntime+"=true).", []string{"node", "resource"}, nil)
	nodeRequestedDesc = prometheus.NewDesc("sandlot_node_requested", "CPU (cores) and memory (bytes) sandlot's pods "+
		"request on each runtime node.", []string{"node", "resource"}, nil)
	nodeInfoDesc = prometheus.NewDesc("sandlot_node_info", "1 per runtime node, with its fingerprint (empty until its "+
		"agent publishes one) and whether it is Ready.", []string{"node", "fingerprint", "ready"}, nil)
)

// nodeState is what the node gauges report of one node.
type nodeState struct {
	name, fingerprint  string
	ready              bool
	capacity, requests placement.Demand
}

// nodeStates are the runtime nodes and the requests of the pods on them.
func nodeStates(nodes []corev1.Node, pods []corev1.Pod) []nodeState {
	used := map[string]placement.Demand{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			used[p.Spec.NodeName] = used[p.Spec.NodeName].Add(placement.PodDemand(&p.Spec))
		}
	}
	out := make([]nodeState, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		out = append(out, nodeState{name: n.Name, fingerprint: n.Labels[sandlotv1.LabelFingerprint], ready: placement.Ineligible(n) == "",
			capacity: placement.Requested(n.Status.Allocatable), requests: used[n.Name]})
	}
	return out
}

// collectNodes sends the node gauges read through reader.
func collectNodes(ctx context.Context, reader client.Reader, ch chan<- prometheus.Metric) {
	nodes := &corev1.NodeList{}
	pods := &corev1.PodList{}
	if reader.List(ctx, nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}) != nil || reader.List(ctx, pods) != nil {
		return
	}
	for _, n := range nodeStates(nodes.Items, pods.Items) {
		for _, m := range []struct {
			desc *prometheus.Desc
			d    placement.Demand
		}{{nodeCapacityDesc, n.capacity}, {nodeRequestedDesc, n.requests}} {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, float64(m.d.MilliCPU)/1000, n.name, "cpu")
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, float64(m.d.Memory), n.name, "memory")
		}
		ready := "false"
		if n.ready {
			ready = "true"
		}
		ch <- prometheus.MustNewConstMetric(nodeInfoDesc, prometheus.GaugeValue, 1, n.name, n.fingerprint, ready)
	}
}
