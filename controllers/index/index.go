package index

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Field indexes the reconcilers look things up by.
const (
	SandboxBySnapshot = "spec.source.snapshot"
	SandboxByTemplate = "spec.source.template"
	SnapshotBySandbox = "spec.source.sandbox"
	// indexPodByPool: a warm pool pod's template and node ("tpl/node"):
	// a label selector on the cache reads every pod of the namespace.
	PodByPool = "metadata.labels.pool-node"
	// indexPodByClaim: a warm pool pod's template and claimant
	// ("tpl/sandbox", "tpl/" while free): a start's claim reads only
	// its template's pool, not every pod of the namespace.
	PodByClaim = "metadata.labels.pool-sandbox"
	// indexSnapshotByTemplate: the Template that controls a Snapshot (its
	// base snapshots and build checkpoints).
	SnapshotByTemplate = "metadata.ownerReferences.template"
)

func Setup(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &sandlotv1.Sandbox{}, SandboxBySnapshot, func(o client.Object) []string {
		// A Sandbox restores from its source snapshot, or from its
		// template's base snapshot.
		sbx := o.(*sandlotv1.Sandbox)
		return append(NonEmpty(sbx.Spec.Source.Snapshot), NonEmpty(sbx.Status.BaseSnapshot)...)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &sandlotv1.Sandbox{}, SandboxByTemplate, func(o client.Object) []string {
		return NonEmpty(o.(*sandlotv1.Sandbox).Spec.Source.Template)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &sandlotv1.Snapshot{}, SnapshotByDependsOn, func(o client.Object) []string {
		return DependsOnKey(o.(*sandlotv1.Snapshot).Status.DependsOn)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &sandlotv1.PausedSandbox{}, PausedByDependsOn, func(o client.Object) []string {
		return DependsOnKey(o.(*sandlotv1.PausedSandbox).Spec.DependsOn)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &sandlotv1.Snapshot{}, SnapshotByTemplate, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "Template" {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, PodByPool, poolPodsBy(sandlotv1.LabelNode)); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, PodByClaim, poolPodsBy(sandlotv1.LabelSandbox)); err != nil {
		return err
	}
	return idx.IndexField(ctx, &sandlotv1.Snapshot{}, SnapshotBySandbox, func(o client.Object) []string {
		return NonEmpty(o.(*sandlotv1.Snapshot).Spec.Source.Sandbox)
	})
}

func PoolKey(tpl, node string) string { return tpl + "/" + node }

// poolPodsBy indexes warm pool pods by their template and the value of
// label ("tpl/<value>").
func poolPodsBy(label string) client.IndexerFunc {
	return func(o client.Object) []string {
		if tpl := o.GetLabels()[sandlotv1.LabelPool]; tpl != "" {
			return []string{PoolKey(tpl, o.GetLabels()[label])}
		}
		return nil
	}
}

func NonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// Field indexes of the dependency edges: "<kind>/<name>" of the data an
// object builds on.
const (
	SnapshotByDependsOn = "status.dependsOn"
	PausedByDependsOn   = "spec.dependsOn"
)

func DependsOnKey(ref *sandlotv1.DataRef) []string {
	if ref == nil || ref.Name == "" {
		return nil
	}
	return []string{ref.Kind + "/" + ref.Name}
}
