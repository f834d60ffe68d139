package data

// Snapshot data is layered: a restored VM's memory is its source's plus
// the pages it changed, so a Snapshot or pause package of a restored
// sandbox needs its source's data for as long as it exists. The
// controller records that edge (DependsOn) when it assigns the work, and
// a Snapshot's in-use finalizer holds its deletion while a Sandbox
// restores from it or another Snapshot or PausedSandbox depends on it —
// whether the deletion is a user's, a Template rebuild's or an expiry's.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/index"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// RestoredFrom is the data a sandbox's VM builds on now: the snapshot of
// its last completed rollback, else what its pod restored (nil: a cold
// boot, which builds on nothing).
func RestoredFrom(sbx *sandlotv1.Sandbox, pod *corev1.Pod) *sandlotv1.DataRef {
	if rb := sbx.Spec.Rollback; rb != nil && rb.RequestID == sbx.Status.LastRollbackRequestID {
		return &sandlotv1.DataRef{Kind: sandlotv1.RestoreKindSnapshot, Name: rb.Snapshot}
	}
	if pod == nil {
		return nil
	}
	src := sandlotv1.PodSource(pod.Annotations)
	if src == nil {
		return nil
	}
	return &sandlotv1.DataRef{Kind: src.Kind, Name: src.Name, UID: src.UID}
}

// dependents names what holds a Snapshot's deletion: the Sandboxes that
// restore from it and have not ended, and every Snapshot and
// PausedSandbox whose data builds on it (being deleted or not: their data
// exists until the agent removes it).
func (r *SnapshotReconciler) dependents(ctx context.Context, snap *sandlotv1.Snapshot) ([]string, error) {
	ns := client.InNamespace(snap.Namespace)
	users := &sandlotv1.SandboxList{}
	if err := r.List(ctx, users, ns, client.MatchingFields{index.SandboxBySnapshot: snap.Name}); err != nil {
		return nil, fmt.Errorf("list sandboxes of snapshot %s: %w", snap.Name, err)
	}
	var names []string
	for _, u := range users.Items {
		if !u.Status.Phase.Terminal() { // an ended sandbox's VM maps nothing
			names = append(names, "sandbox "+u.Name)
		}
	}
	live := r.APIReader
	if len(names) > 0 {
		live = nil // held either way: no need to confirm
	}
	built, err := BuildsOn(ctx, r.Client, live, snap.Namespace, sandlotv1.RestoreKindSnapshot, snap.Name, snap.UID)
	if err != nil {
		return nil, err
	}
	names = append(names, built...)
	sort.Strings(names)
	return names, nil
}

// holdDeletion records on a deleted data object (whose conds are its
// status conditions) that its deletion waits for the named dependents.
func holdDeletion(ctx context.Context, c client.Client, rec events.EventRecorder, obj client.Object,
	conds *[]metav1.Condition, what string, names []string) error {
	orig := obj.DeepCopyObject().(client.Object)
	writes.SetCondition(conds, obj.GetGeneration(), sandlotv1.ConditionDeletionHeld, metav1.ConditionTrue,
		sandlotv1.ReasonInUse, "deletion waits for what "+what+": "+strings.Join(names, ", "))
	return client.IgnoreNotFound(writes.PatchStatus(ctx, c, rec, orig, obj))
}

// BuildsOn names the Snapshots and PausedSandboxes of ns whose data builds
// on the data kind/name (of that UID): being deleted or not, their data
// exists until the agent removes it. It reads the cache, and when that
// names none, live reads confirm it (live may be nil: the cache only): a
// dependent recorded a moment ago may not be cached yet, and what follows
// "none" deletes the data for good.
func BuildsOn(ctx context.Context, c client.Client, live client.Reader, namespace, kind, name string, uid types.UID) ([]string, error) {
	key := kind + "/" + name
	snaps, pkgs := &sandlotv1.SnapshotList{}, &sandlotv1.PausedSandboxList{}
	ns := client.InNamespace(namespace)
	if err := c.List(ctx, snaps, ns, client.MatchingFields{index.SnapshotByDependsOn: key}); err != nil {
		return nil, fmt.Errorf("list snapshots depending on %s: %w", key, err)
	}
	if err := c.List(ctx, pkgs, ns, client.MatchingFields{index.PausedByDependsOn: key}); err != nil {
		return nil, fmt.Errorf("list paused sandboxes depending on %s: %w", key, err)
	}
	names := buildingOn(snaps.Items, pkgs.Items, kind, name, uid)
	if len(names) > 0 || live == nil {
		return names, nil
	}
	if err := listNamingLive(ctx, live, snaps, ns, "status.dependsOn.name", name); err != nil {
		return nil, fmt.Errorf("confirm no snapshot depends on %s: %w", key, err)
	}
	if err := listNamingLive(ctx, live, pkgs, ns, "spec.dependsOn.name", name); err != nil {
		return nil, fmt.Errorf("confirm no paused sandbox depends on %s: %w", key, err)
	}
	return buildingOn(snaps.Items, pkgs.Items, kind, name, uid), nil
}

// listNamingLive lists the objects whose field (a selectable field of the
// CRD) is name, on the API server: the server filters, so a release at
// 1,000 nodes does not read every base Snapshot. A CRD installed before
// it had the field (the chart does not upgrade CRDs) refuses the
// selector: then every object of the namespace is read.
func listNamingLive(ctx context.Context, live client.Reader, list client.ObjectList, ns client.InNamespace, field, name string) error {
	err := live.List(ctx, list, ns, client.MatchingFields{field: name})
	if apierrors.IsBadRequest(err) {
		err = live.List(ctx, list, ns)
	}
	return err
}

// buildingOn names those of snaps and pkgs whose data builds on kind/name
// of that UID.
func buildingOn(snaps []sandlotv1.Snapshot, pkgs []sandlotv1.PausedSandbox, kind, name string, uid types.UID) []string {
	refers := func(ref *sandlotv1.DataRef) bool {
		return ref != nil && ref.Kind == kind && ref.Name == name && (ref.UID == "" || types.UID(ref.UID) == uid)
	}
	var names []string
	for _, s := range snaps {
		if refers(s.Status.DependsOn) {
			names = append(names, "snapshot "+s.Name)
		}
	}
	for _, p := range pkgs {
		if refers(p.Spec.DependsOn) {
			names = append(names, "pausedsandbox "+p.Name)
		}
	}
	return names
}

// snapshotsDependedOn maps a Snapshot or PausedSandbox to the Snapshot it
// builds on, so a dependent's deletion wakes the deletion it held.
func snapshotsDependedOn(_ context.Context, o client.Object) []reconcile.Request {
	return dependedOn(o, sandlotv1.RestoreKindSnapshot)
}

// pausedDependedOn is the same for the PausedSandbox one builds on.
func pausedDependedOn(_ context.Context, o client.Object) []reconcile.Request {
	return dependedOn(o, sandlotv1.RestoreKindPausedSandbox)
}

func dependedOn(o client.Object, kind string) []reconcile.Request {
	var ref *sandlotv1.DataRef
	switch v := o.(type) {
	case *sandlotv1.Snapshot:
		ref = v.Status.DependsOn
	case *sandlotv1.PausedSandbox:
		ref = v.Spec.DependsOn
	}
	if ref == nil || ref.Kind != kind {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
}

// expiresAt is when data created at created expires after its own
// seconds, else the default (0: never); nil when it does not expire.
func expiresAt(created metav1.Time, own *int64, def time.Duration) *metav1.Time {
	d := def
	if own != nil {
		d = time.Duration(*own) * time.Second
	}
	if d <= 0 {
		return nil
	}
	t := metav1.NewTime(created.Add(d))
	return &t
}

// deleteIfExpired deletes obj once at is past and otherwise says when
// to look again.
func deleteIfExpired(ctx context.Context, c client.Client, obj client.Object, at *metav1.Time, now time.Time) (time.Duration, error) {
	if at == nil {
		return 0, nil
	}
	if left := at.Sub(now); left > 0 {
		return left, nil
	}
	uid := obj.GetUID()
	if err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("delete expired %s: %w", obj.GetName(), err)
	}
	return 0, nil
}
