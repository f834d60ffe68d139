package sandbox

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// sandboxPlaced: the sandbox has a node (or had one, deleting).
func sandboxPlaced(o client.Object) bool {
	s, ok := o.(*sandlotv1.Sandbox)
	return ok && (s.Status.NodeName != "" || s.DeletionTimestamp != nil)
}

// always ranks every object's events ahead (a sandbox's pod: it exists
// only once the sandbox is placed).
func always(client.Object) bool { return true }
