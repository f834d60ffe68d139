package template

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
)

// ReadyBases is what a template's Ready base snapshots give a start: the
// base on each node that has one (PerNode; Nodes sorted), and one remote
// Ready base for the rest (Remote: Restore, of that Fingerprint). Shared
// by every start of the template between changes: read only.
type ReadyBases struct {
	PerNode     map[string]sandlotv1.RestoreRef
	Nodes       []string
	Remote      bool
	Fingerprint string
	Restore     sandlotv1.RestoreRef
}

// BaseMemo remembers each template's ReadyBases (for the Sandbox
// reconciler's starts) until the template's spec
// or base snapshots, or one of the snapshots it controls, change (not at
// its other status changes: a pool's counts move at every claim). A
// template has a base per node, and without it every start read them all
// (at 1,000 nodes a fifth of the controller's CPU per create, most of it
// copying 1,000 Snapshots).
type BaseMemo struct {
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
	bases      ReadyBases
}

// NewBaseMemo is an empty memo; Watch hooks it to a manager's cache.
func NewBaseMemo() *BaseMemo {
	return &BaseMemo{epoch: map[types.NamespacedName]uint64{}, entries: map[types.NamespacedName]baseEntry{}}
}

// Watch hooks the memo to the manager's cache. The cache stores an object
// before it notifies: an epoch read before a list that missed a change is
// older than the epoch that change leaves.
func (m *BaseMemo) Watch(ctx context.Context, mgr ctrl.Manager) error {
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

func (m *BaseMemo) bump(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch[key]++
}

func (m *BaseMemo) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.epoch, key)
	delete(m.entries, key)
}

// get is tpl's remembered bases (ok false: none, or stale) and the epoch
// to remember a fresh read at.
func (m *BaseMemo) get(tpl *sandlotv1.Template) (ReadyBases, uint64, bool) {
	key := client.ObjectKeyFromObject(tpl)
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	epoch := m.epoch[key]
	if !ok || e.uid != tpl.UID || e.generation != tpl.Generation || e.epoch != epoch || !slices.Equal(e.status, tpl.Status.BaseSnapshots) {
		return ReadyBases{}, epoch, false
	}
	return e.bases, epoch, true
}

func (m *BaseMemo) put(tpl *sandlotv1.Template, epoch uint64, b ReadyBases) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[client.ObjectKeyFromObject(tpl)] = baseEntry{uid: tpl.UID, generation: tpl.Generation,
		status: slices.Clone(tpl.Status.BaseSnapshots), epoch: epoch, bases: b}
}

// readBases reads tpl's Ready bases of its current revision from c (a
// cache).
func readBases(ctx context.Context, c client.Reader, tpl *sandlotv1.Template) (ReadyBases, error) {
	owned := &sandlotv1.SnapshotList{}
	if err := c.List(ctx, owned, client.InNamespace(tpl.Namespace), client.MatchingFields{index.SnapshotByTemplate: tpl.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return ReadyBases{}, fmt.Errorf("list base snapshots of %s: %w", tpl.Name, err)
	}
	byName := make(map[string]*sandlotv1.Snapshot, len(owned.Items))
	for i := range owned.Items {
		byName[owned.Items[i].Name] = &owned.Items[i]
	}
	b := ReadyBases{PerNode: map[string]sandlotv1.RestoreRef{}}
	for _, base := range tpl.Status.BaseSnapshots {
		if base.Revision != BaseRevision(tpl) || base.Phase != sandlotv1.BaseReady {
			continue
		}
		snap, ok := byName[base.Snapshot]
		if !ok || !metav1.IsControlledBy(snap, tpl) || snap.DeletionTimestamp != nil || snap.Status.Phase != sandlotv1.DataReady {
			continue
		}
		rs := sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: snap.Name, UID: string(snap.UID), Location: snap.Status.Location}
		b.PerNode[base.Node] = rs
		b.Nodes = append(b.Nodes, base.Node)
		if snap.Status.RemoteStatus == sandlotv1.RemoteReady && !b.Remote {
			b.Remote, b.Fingerprint, b.Restore = true, snap.Status.Fingerprint.Key(), rs
		}
	}
	slices.Sort(b.Nodes)           // dataSource.Nodes is sorted
	b.Nodes = slices.Clip(b.Nodes) // shared: an append elsewhere copies
	return b, nil
}

// Of is tpl's Ready bases read from c (a cache), remembered between
// changes (a nil memo reads every time).
func (m *BaseMemo) Of(ctx context.Context, c client.Reader, tpl *sandlotv1.Template) (ReadyBases, error) {
	if m == nil {
		return readBases(ctx, c, tpl)
	}
	b, epoch, ok := m.get(tpl)
	if ok {
		return b, nil
	}
	b, err := readBases(ctx, c, tpl)
	if err == nil {
		m.put(tpl, epoch, b)
	}
	return b, err
}
