package podspec

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/placement"
)

// ClassTerms is what the sandlot RuntimeClass's admission merges into
// each of its pods: the VM's overhead, and the tolerations and node
// selector of its scheduling (the chart's agent ones).
type ClassTerms struct {
	Overhead    corev1.ResourceList
	Constraints placement.Constraints
}

func RuntimeClassTerms(ctx context.Context, c client.Reader) (ClassTerms, error) {
	rc := &nodev1.RuntimeClass{}
	err := c.Get(ctx, types.NamespacedName{Name: sandlotv1.RuntimeClassName}, rc)
	switch {
	case apierrors.IsNotFound(err):
		return ClassTerms{}, nil // pod creation will say the RuntimeClass is missing
	case err != nil:
		return ClassTerms{}, fmt.Errorf("get runtimeclass %s: %w", sandlotv1.RuntimeClassName, err)
	}
	var t ClassTerms
	if rc.Overhead != nil {
		t.Overhead = rc.Overhead.PodFixed
	}
	if s := rc.Scheduling; s != nil {
		t.Constraints = placement.Constraints{Tolerations: s.Tolerations, NodeSelector: s.NodeSelector}
	}
	return t, nil
}
