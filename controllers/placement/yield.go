package placement

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Pool pods — warm pods and start slots — are capacity held for starts
// that may come, not work: they give way to a start that finds no room.
// When no node fits a sandbox and the unclaimed pool pods on a node it
// may run on hold what it lacks, the fewest of them go (start slots, which
// hold no VM, before warm pods) and that node's pool refills wait until
// the start is placed (Holds): otherwise the refill would take back
// the room it was given.

// Spare is an unclaimed pool pod as the pod usage view shows it.
type Spare struct {
	Key             types.NamespacedName
	UID             types.UID
	ResourceVersion string
	Demand          Demand
	Slot            bool
	Going           bool // being deleted: its room comes without another delete
}

// spareOf is every node's unclaimed pool pods (LabelSandbox present and
// empty: a claim sets it): those going already first, then start slots,
// then by name.
func spareOf(pods []corev1.Pod) map[string][]Spare {
	out := map[string][]Spare{}
	for i := range pods {
		p := &pods[i]
		owner, sandlot := p.Labels[sandlotv1.LabelSandbox]
		if !sandlot || owner != "" || p.Spec.NodeName == "" {
			continue
		}
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], Spare{Key: types.NamespacedName{Namespace: p.Namespace, Name: p.Name},
			UID: p.UID, ResourceVersion: p.ResourceVersion, Demand: PodDemand(&p.Spec), Slot: sandlotv1.IsStartSlot(p.Annotations),
			Going: p.DeletionTimestamp != nil})
	}
	rank := func(s Spare) int {
		switch {
		case s.Going:
			return 0
		case s.Slot:
			return 1
		}
		return 2
	}
	for _, s := range out {
		slices.SortFunc(s, func(a, b Spare) int {
			return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.Key.String(), b.Key.String()))
		})
	}
	return out
}

// Yield is a node whose pool pods make room for a sandbox: give them
// up and it fits.
type Yield struct {
	Node string
	Give []Spare
}

// yieldFor finds, when no node has room for req, the node that has it
// once the fewest of its spare pool pods are given up: of those holding
// the source data first, then any the sandbox may run on. nil: none does.
func yieldFor(req Request, spare map[string][]Spare) *Yield {
	var best *Yield
	bestLocal := false
	for i := range req.Nodes {
		n := &req.Nodes[i]
		if IneligibleFor(n, req.Constraints) != "" {
			continue
		}
		local, why := req.Source.On(n)
		if why != "" {
			continue
		}
		give, ok := giveUp(n, req.Used[n.Name], req.Demand, spare[n.Name])
		if !ok {
			continue
		}
		better := best == nil || (local && !bestLocal) ||
			(local == bestLocal && (len(give) < len(best.Give) || (len(give) == len(best.Give) && n.Name < best.Node)))
		if better {
			best, bestLocal = &Yield{Node: n.Name, Give: give}, local
		}
	}
	return best
}

// giveUp is what of spare, given up, leaves room for want on n: the
// shortest prefix that does, then without each pod not going already
// that the rest make room without (a small pod sorted before a large one
// that alone is enough stays).
func giveUp(n *corev1.Node, used, want Demand, spare []Spare) ([]Spare, bool) {
	fits := func(give []Spare) bool {
		u := used
		for _, s := range give {
			u = Demand{MilliCPU: u.MilliCPU - s.Demand.MilliCPU, Memory: u.Memory - s.Demand.Memory}
		}
		_, why := room(n, u, want)
		return why == ""
	}
	for i := 1; i <= len(spare); i++ {
		if !fits(spare[:i]) {
			continue
		}
		give := slices.Clone(spare[:i])
		for j := len(give) - 2; j >= 0; j-- { // the last one was needed
			if without := slices.Delete(slices.Clone(give), j, j+1); !give[j].Going && fits(without) {
				give = without
			}
		}
		return give, true
	}
	return nil, false
}
