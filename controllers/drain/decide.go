// Package drain moves sandboxes off cordoned nodes: `kubectl drain` (or
// a cordon and `kubectl sandlot drain`) pauses each sandbox on the node
// and resumes it on another, same ID, memory and files, through the
// pause and resume the Sandbox reconciler already does: it only marks
// the sandbox (AnnotationMoveFrom) and the Sandbox reconciler treats a
// marked sandbox as paused while its pod is on that node or its package
// is not yet in the shared store. Every sandbox pod is under a
// PodDisruptionBudget that allows no eviction, so a drain waits for the
// moves instead of killing VMs; a sandbox that cannot move says why
// (AnnotationMoveBlocked, an Event) and holds the drain.
package drain

import (
	corev1 "k8s.io/api/core/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// world is what one sandbox's move decision looks at.
type world struct {
	Sandbox *sandlotv1.Sandbox
	// Node is the node its status names; Origin the one its move-from
	// annotation names (nil: none, or gone).
	Node, Origin *corev1.Node
	// SharedStore: pause packages reach a store every node reads (s3,
	// juicefs), so a sandbox paused on one node resumes on another.
	SharedStore bool
	// Elsewhere is why no other node can run it ("": one can).
	Elsewhere string
}

// marks are the annotations a sandbox should carry.
type marks struct {
	MoveFrom, Blocked string
}

// decide is a sandbox's move as a pure function of what is.
func decide(w world) marks {
	sbx := w.Sandbox
	if from := sbx.Annotations[sandlotv1.AnnotationMoveFrom]; from != "" {
		running := sbx.Status.Phase == sandlotv1.SandboxRunning
		switch {
		case running && sbx.Status.NodeName != from:
			return marks{} // moved
		case !cordoned(w.Origin) && (running || sbx.Status.Phase == sandlotv1.SandboxPaused):
			return marks{} // uncordoned: it stays, or resumes where it may
		case sbx.Status.Phase.Terminal():
			return marks{}
		}
		return marks{MoveFrom: from}
	}
	if !cordoned(w.Node) || sbx.Status.Phase != sandlotv1.SandboxRunning || sbx.Spec.Paused {
		return marks{}
	}
	switch {
	case sbx.Annotations[sandlotv1.AnnotationBaseOf] != "":
		return marks{Blocked: "a template builder: it leaves the node when its build ends"}
	case !w.SharedStore:
		return marks{Blocked: "the store is local: a paused sandbox resumes only on its own node (uncordon the node, or delete the sandbox)"}
	case w.Elsewhere != "":
		return marks{Blocked: "no other node can run it: " + w.Elsewhere}
	}
	return marks{MoveFrom: w.Node.Name}
}

func cordoned(n *corev1.Node) bool {
	return n != nil && n.Spec.Unschedulable
}
