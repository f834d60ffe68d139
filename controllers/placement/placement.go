package placement

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Demand is what one sandbox takes from a node: its VM plus the
// RuntimeClass overhead.
type Demand struct {
	MilliCPU int64
	Memory   int64
}

func (d Demand) Add(o Demand) Demand {
	return Demand{MilliCPU: d.MilliCPU + o.MilliCPU, Memory: d.Memory + o.Memory}
}

func (d Demand) Max(o Demand) Demand {
	return Demand{MilliCPU: max(d.MilliCPU, o.MilliCPU), Memory: max(d.Memory, o.Memory)}
}

// DemandOf is what a VM of these resources requests, overhead included.
func DemandOf(r sandlotv1.Resources, overhead corev1.ResourceList, milliCPUPerVCPU int64) Demand {
	d := Demand{MilliCPU: int64(r.VCPU) * milliCPUPerVCPU, Memory: int64(r.MemoryMiB) << 20}
	d.MilliCPU += overhead.Cpu().MilliValue()
	d.Memory += overhead.Memory().Value()
	return d
}

// DataSource is where the state a sandbox restores from lives.
type DataSource struct {
	// Nodes hold the data locally (a template's base snapshots: one per
	// node); none for a cold boot. Sorted: placement looks up every node
	// in it (at 1,000 nodes a scan each was a million comparisons).
	Nodes []string
	// Remote says other nodes may restore it (remoteStatus Ready).
	Remote bool
	// Fingerprint must equal a node's fingerprint label for a remote
	// restore; empty when none was recorded.
	Fingerprint string
}

// On says whether node n may restore the data: local (n holds it), or
// else why not ("" for a node that may fetch it, or any node when there
// is no data).
func (d DataSource) On(n *corev1.Node) (local bool, why string) {
	_, local = slices.BinarySearch(d.Nodes, n.Name)
	switch {
	case local || len(d.Nodes) == 0:
		return local, ""
	case !d.Remote:
		return false, "source data is local to " + strings.Join(d.Nodes, ", ")
	case d.Fingerprint != "" && n.Labels[sandlotv1.LabelFingerprint] != d.Fingerprint:
		return false, "incompatible fingerprint"
	}
	return false, ""
}

// Constraints are where a sandbox's template lets it run: the taints
// it tolerates and the labels a node must have.
type Constraints struct {
	Tolerations  []corev1.Toleration
	NodeSelector map[string]string
}

func TemplateConstraints(tpl *sandlotv1.Template) Constraints {
	return Constraints{Tolerations: tpl.Spec.Tolerations, NodeSelector: tpl.Spec.NodeSelector}
}

// And is both: the tolerations of either, the labels of both selectors
// (c's value where both name a key; the RuntimeClass admission refuses
// such a pod anyway).
func (c Constraints) And(o Constraints) Constraints {
	var sel map[string]string
	if len(c.NodeSelector)+len(o.NodeSelector) > 0 {
		sel = maps.Clone(o.NodeSelector)
		if sel == nil {
			sel = map[string]string{}
		}
		maps.Copy(sel, c.NodeSelector)
	}
	return Constraints{Tolerations: slices.Concat(c.Tolerations, o.Tolerations), NodeSelector: sel}
}

// excludes says why these constraints rule n out, or "". As for the
// scheduler, NoSchedule and NoExecute taints must be tolerated;
// PreferNoSchedule ones are not avoided.
func (c Constraints) excludes(n *corev1.Node) string {
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(c.Tolerations, func(tol corev1.Toleration) bool {
			// Lt/Gt compare numerically, as the scheduler does with its gate on.
			return tol.ToleratesTaint(logr.Discard(), t, true)
		}) {
			return "untolerated taint " + t.ToString()
		}
	}
	if len(c.NodeSelector) > 0 && !labels.SelectorFromSet(c.NodeSelector).Matches(labels.Set(n.Labels)) {
		return "not matching the pod's node selector"
	}
	return ""
}

// Request is everything placement decides from: pure data.
type Request struct {
	Nodes       []corev1.Node
	Used        map[string]Demand // by node name
	Demand      Demand
	Source      DataSource
	Constraints Constraints
}

// Placement is the decision: a node, or why there is none.
type Placement struct {
	Node    string
	Reason  string
	Message string
	// yield, when no node has room, is a node whose pool pods make it.
	Yield *Yield
}

// place picks a node for a sandbox: of the nodes holding its source data
// that are eligible and have room, the one with the most free memory;
// otherwise, when the data is remote Ready (or there is no data), the
// compatible eligible node with the most free memory.
func place(req Request) Placement {
	var (
		candidates []string
		free       = map[string]int64{}
		rejected   = map[string]int{}
		preferred  []string
	)
	for i := range req.Nodes {
		n := &req.Nodes[i]
		if why := IneligibleFor(n, req.Constraints); why != "" {
			rejected[why]++
			continue
		}
		local, why := req.Source.On(n)
		if why != "" {
			rejected[why]++
			continue
		}
		left, why := room(n, req.Used[n.Name], req.Demand)
		if why != "" {
			rejected[why]++
			continue
		}
		if local {
			preferred = append(preferred, n.Name)
		}
		candidates = append(candidates, n.Name)
		free[n.Name] = left
	}
	if len(preferred) > 0 {
		node := mostFree(preferred, free)
		return Placement{Node: node, Reason: sandlotv1.ReasonPlaced,
			Message: "placed on " + node + ", which holds the source data"}
	}
	if len(candidates) == 0 {
		return noPlacement(len(req.Nodes), rejected)
	}
	node := mostFree(candidates, free)
	return Placement{Node: node, Reason: sandlotv1.ReasonPlaced, Message: "placed on " + node}
}

// mostFree is the node with the most free memory (by name on a tie).
func mostFree(nodes []string, free map[string]int64) string {
	best := nodes[0]
	for _, n := range nodes[1:] {
		if free[n] > free[best] || (free[n] == free[best] && n < best) {
			best = n
		}
	}
	return best
}

// Ineligible says why a node cannot run sandboxes that tolerate no
// taints, or "".
func Ineligible(n *corev1.Node) string {
	return IneligibleFor(n, Constraints{})
}

// IneligibleFor says why a node cannot run sandboxes under c, or "".
func IneligibleFor(n *corev1.Node, c Constraints) string {
	if n.Labels[sandlotv1.LabelRuntime] != "true" {
		return "no " + sandlotv1.LabelRuntime + "=true label"
	}
	if n.Spec.Unschedulable {
		return "unschedulable"
	}
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
			break
		}
	}
	if !ready {
		return "not ready" // before its taints: a not-ready node is tainted so
	}
	return c.excludes(n)
}

// room returns the memory left on n after placing want, or why it does
// not fit.
func room(n *corev1.Node, used, want Demand) (int64, string) {
	alloc := n.Status.Allocatable
	cpu := alloc.Cpu().MilliValue() - used.MilliCPU
	mem := alloc.Memory().Value() - used.Memory
	switch {
	case want.MilliCPU > cpu:
		return 0, "insufficient cpu"
	case want.Memory > mem:
		return 0, "insufficient memory"
	}
	return mem - want.Memory, ""
}

// noPlacement explains, like the scheduler does, why no node fits.
func noPlacement(total int, rejected map[string]int) Placement {
	if total == 0 {
		return Placement{Reason: sandlotv1.ReasonNoEligibleNode,
			Message: "no node is labelled " + sandlotv1.LabelRuntime + "=true"}
	}
	reasons := make([]string, 0, len(rejected))
	capacityOnly := true
	for why, n := range rejected {
		reasons = append(reasons, fmt.Sprintf("%d %s", n, why))
		if !strings.HasPrefix(why, "insufficient") {
			capacityOnly = false
		}
	}
	sort.Strings(reasons)
	reason := sandlotv1.ReasonNoEligibleNode
	if capacityOnly {
		reason = sandlotv1.ReasonInsufficientCapacity
	}
	return Placement{Reason: reason,
		Message: fmt.Sprintf("0/%d nodes are available: %s", total, strings.Join(reasons, ", "))}
}
