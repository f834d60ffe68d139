package sandbox

import (
	"context"
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/index"
	"github.com/sandlot-dev/sandlot/controllers/template"
)

// baseSet is what a template's Ready base snapshots give a start: the
// base on each node that has one, and one remote Ready base for the rest.
// Shared by every start of the template between changes: read only.
type baseSet struct {
	perNode     map[string]sandlotv1.RestoreRef
	nodes       []string
	remote      bool
	fingerprint string
	restore     sandlotv1.RestoreRef
}

// baseMemo remembers each template's baseSet until the template's spec
// or base snapshots, or one of the snapshots it controls, change (not at
// its other status changes: a pool's counts move at every claim). A
// template has a base per node, and without it every start read them all
// (at 1,000 nodes a fifth of the controller's CPU per create, most of it
// copying 1,000 Snapshots).
type baseMemo struct {
	mu sync.Mutex
	// epoch counts the changes to a template's snapshots seen by the
	// cache; an entry read at an older epoch is stale.
	epoch   map[types.NamespacedName]uint64
	entries map[types.NamespacedName]baseEntry
}

type baseEntry struct {
	uid        types.UID
	generation int64
	status     []sandlotv1.BaseSnapshot // the template's, as read
	epoch      uint64
	bases      baseSet
}

func newBaseMemo() *baseMemo {
	return &baseMemo{epoch: map[types.NamespacedName]uint64{}, entries: map[types.NamespacedName]baseEntry{}}
}

// watch hooks the memo to the manager's cache. The cache stores an object
// before it notifies: an epoch read before a list that missed a change is
// older than the epoch that change leaves.
func (m *baseMemo) watch(ctx context.Context, mgr ctrl.Manager) error {
	snaps, err := mgr.GetCache().GetInformer(ctx, &sandlotv1.Snapshot{})
	if err != nil {
		return fmt.Errorf("snapshot informer for the base memo: %w", err)
	}
	bump := func(o any) {
		if obj, ok := objectOf(o); ok {
			if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "Template" {
				m.bump(types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name})
			}
		}
	}
	if _, err := snaps.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: bump,
		UpdateFunc: func(_, n any) { bump(n) }, DeleteFunc: bump}); err != nil {
		return fmt.Errorf("watch snapshots for the base memo: %w", err)
	}
	tpls, err := mgr.GetCache().GetInformer(ctx, &sandlotv1.Template{})
	if err != nil {
		return fmt.Errorf("template informer for the base memo: %w", err)
	}
	_, err = tpls.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(o any) {
		if obj, ok := objectOf(o); ok {
			m.forget(client.ObjectKeyFromObject(obj))
		}
	}})
	if err != nil {
		return fmt.Errorf("watch templates for the base memo: %w", err)
	}
	return nil
}

// objectOf unwraps a delete notification's tombstone.
func objectOf(o any) (client.Object, bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	obj, ok := o.(client.Object)
	return obj, ok
}

func (m *baseMemo) bump(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch[key]++
}

func (m *baseMemo) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.epoch, key)
	delete(m.entries, key)
}

// get is tpl's remembered bases (ok false: none, or stale) and the epoch
// to remember a fresh read at.
func (m *baseMemo) get(tpl *sandlotv1.Template) (baseSet, uint64, bool) {
	key := client.ObjectKeyFromObject(tpl)
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	epoch := m.epoch[key]
	if !ok || e.uid != tpl.UID || e.generation != tpl.Generation || e.epoch != epoch || !slices.Equal(e.status, tpl.Status.BaseSnapshots) {
		return baseSet{}, epoch, false
	}
	return e.bases, epoch, true
}

func (m *baseMemo) put(tpl *sandlotv1.Template, epoch uint64, b baseSet) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[client.ObjectKeyFromObject(tpl)] = baseEntry{uid: tpl.UID, generation: tpl.Generation,
		status: slices.Clone(tpl.Status.BaseSnapshots), epoch: epoch, bases: b}
}

// readBases reads tpl's Ready bases of its current revision from the cache.
func (r *Reconciler) readBases(ctx context.Context, tpl *sandlotv1.Template) (baseSet, error) {
	owned := &sandlotv1.SnapshotList{}
	if err := r.List(ctx, owned, client.InNamespace(tpl.Namespace), client.MatchingFields{index.SnapshotByTemplate: tpl.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return baseSet{}, fmt.Errorf("list base snapshots of %s: %w", tpl.Name, err)
	}
	byName := make(map[string]*sandlotv1.Snapshot, len(owned.Items))
	for i := range owned.Items {
		byName[owned.Items[i].Name] = &owned.Items[i]
	}
	b := baseSet{perNode: map[string]sandlotv1.RestoreRef{}}
	for _, base := range tpl.Status.BaseSnapshots {
		if base.Revision != template.BaseRevision(tpl) || base.Phase != sandlotv1.BaseReady {
			continue
		}
		snap, ok := byName[base.Snapshot]
		if !ok || !metav1.IsControlledBy(snap, tpl) || snap.DeletionTimestamp != nil || snap.Status.Phase != sandlotv1.DataReady {
			continue
		}
		rs := sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: snap.Name, UID: string(snap.UID), Location: snap.Status.Location}
		b.perNode[base.Node] = rs
		b.nodes = append(b.nodes, base.Node)
		if snap.Status.RemoteStatus == sandlotv1.RemoteReady && !b.remote {
			b.remote, b.fingerprint, b.restore = true, snap.Status.Fingerprint.Key(), rs
		}
	}
	slices.Sort(b.nodes)           // dataSource.Nodes is sorted
	b.nodes = slices.Clip(b.nodes) // shared: an append elsewhere copies
	return b, nil
}

// basesOf is tpl's Ready bases, remembered between changes when the
// reconciler has a memo.
func (r *Reconciler) basesOf(ctx context.Context, tpl *sandlotv1.Template) (baseSet, error) {
	if r.bases == nil {
		return r.readBases(ctx, tpl)
	}
	b, epoch, ok := r.bases.get(tpl)
	if ok {
		return b, nil
	}
	b, err := r.readBases(ctx, tpl)
	if err == nil {
		r.bases.put(tpl, epoch, b)
	}
	return b, err
}
