package template

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// The build step cache (E2B's): the node agent pauses after each step
// that changes the guest and the controller snapshots the builder there
// (a checkpoint Snapshot owned by the Template, named by what the guest's
// state depends on: sandlotv1.BuildCheckpointName). A later build's
// builder restores the last checkpoint whose steps are unchanged instead
// of booting the image, and the agent runs only the steps after it.

// builderFrom is where a builder starts: Step steps done, restored from
// Checkpoint; zero for a cold boot.
type builderFrom struct {
	Step       int
	Checkpoint string
}

// checkpointable is whether step n (1-based) of steps takes a checkpoint.
func checkpointable(steps []sandlotv1.BuildStep, n int) bool {
	return n >= 1 && n <= len(steps) && steps[n-1].Type.ChangesGuest()
}

// lastCheckpoint finds the latest step whose guest state a Ready
// checkpoint on node holds: steps after a checkpoint that only set ENV or
// USER are done by it too (the agent replays them).
func (r *Reconciler) lastCheckpoint(ctx context.Context, tpl *sandlotv1.Template, node string) (builderFrom, error) {
	if tpl.Spec.Build == nil {
		return builderFrom{}, nil
	}
	steps := tpl.Spec.Build.Steps
	for n := len(steps); n >= 1; n-- {
		if !checkpointable(steps, n) {
			continue
		}
		name := sandlotv1.BuildCheckpointName(tpl, node, n)
		snap, err := getOrNil(ctx, r.Client, types.NamespacedName{Namespace: tpl.Namespace, Name: name}, &sandlotv1.Snapshot{})
		if err != nil {
			return builderFrom{}, err
		}
		if snap == nil || snap.DeletionTimestamp != nil || snap.Status.Phase != sandlotv1.DataReady || snap.Status.NodeName != node ||
			!metav1.IsControlledBy(snap, tpl) {
			continue
		}
		done := n
		for done < len(steps) && !steps[done].Type.ChangesGuest() {
			done++
		}
		return builderFrom{Step: done, Checkpoint: name}, nil
	}
	return builderFrom{}, nil
}

// checkpointSnapshot is the checkpoint of builder after step n on node.
func checkpointSnapshot(tpl *sandlotv1.Template, node string, n int, builder string) *sandlotv1.Snapshot {
	snap := &sandlotv1.Snapshot{Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: builder}}}
	snap.Name, snap.Namespace = sandlotv1.BuildCheckpointName(tpl, node, n), tpl.Namespace
	snap.Labels = map[string]string{sandlotv1.LabelBuildCheckpoint: tpl.Name, sandlotv1.LabelNode: node}
	snap.OwnerReferences = []metav1.OwnerReference{templateOwner(tpl)}
	return snap
}

// dropStaleCheckpoints deletes the template's checkpoints on nodes whose
// current base is Ready that are not of the current build's steps: the
// cache holds one build's prefixes per node.
func (r *Reconciler) dropStaleCheckpoints(ctx context.Context, tpl *sandlotv1.Template, current map[string]sandlotv1.BaseSnapshot) error {
	list := &sandlotv1.SnapshotList{}
	if err := r.List(ctx, list, client.InNamespace(tpl.Namespace), client.MatchingLabels{sandlotv1.LabelBuildCheckpoint: tpl.Name}); err != nil {
		return fmt.Errorf("list checkpoints of %s: %w", tpl.Name, err)
	}
	for i := range list.Items {
		snap := &list.Items[i]
		node := snap.Labels[sandlotv1.LabelNode]
		if cur, ok := current[node]; !ok || cur.Phase != sandlotv1.BaseReady || snap.DeletionTimestamp != nil || currentCheckpoint(tpl, node, snap.Name) {
			continue
		}
		if err := r.Delete(ctx, snap); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete stale checkpoint %s: %w", snap.Name, err)
		}
	}
	return nil
}

// currentCheckpoint is whether name is one of the current build's
// checkpoints on node.
func currentCheckpoint(tpl *sandlotv1.Template, node, name string) bool {
	if tpl.Spec.Build == nil {
		return false
	}
	for n := 1; n <= len(tpl.Spec.Build.Steps); n++ {
		if checkpointable(tpl.Spec.Build.Steps, n) && sandlotv1.BuildCheckpointName(tpl, node, n) == name {
			return true
		}
	}
	return false
}
