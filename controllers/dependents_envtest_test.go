package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/data"
)

// TestSnapshotOfRestoredSandboxHoldsItsBase: a Snapshot of a sandbox
// restored from a Snapshot records that it builds on it, and the base's
// deletion waits — with the dependent named in DeletionHeld and an Event
// — until the dependent snapshot is gone, even after the sandbox ended.
func TestSnapshotOfRestoredSandboxHoldsItsBase(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("dep-node", "8", "16Gi", nil)
	base := h.readySnapshot("base", "dep-node", sandlotv1.RemoteNotApplicable, 512)
	h.running(newSandbox("child", sandlotv1.SandboxSource{Snapshot: "base"}), "10.88.4.1")
	h.create(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "layer"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "child"}}})
	h.eventually(10*time.Second, "the layer depends on its base", func() error {
		got := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key("layer"), got); err != nil {
			return err
		}
		if d := got.Status.DependsOn; d == nil || d.Name != "base" || d.Kind != "Snapshot" || d.UID != string(base.UID) {
			return errorf("dependsOn %+v", got.Status.DependsOn)
		}
		return nil
	})
	if err := h.c.Delete(context.Background(), h.sandbox("child")); err != nil {
		t.Fatal(err)
	}
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "child"}})
	if err := h.c.Delete(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "the base's deletion is held by the layer", func() error {
		got := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key("base"), got); err != nil {
			return err
		}
		c := condition(got.Status.Conditions, sandlotv1.ConditionDeletionHeld)
		if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "snapshot layer") {
			return errorf("DeletionHeld %+v", c)
		}
		return h.hasEvent(got.UID, sandlotv1.ReasonInUse)
	})
	h.consistently(time.Second, "the base is kept", func() error {
		return h.c.Get(context.Background(), h.key("base"), &sandlotv1.Snapshot{})
	})
	if err := h.c.Delete(context.Background(), &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "layer", Namespace: h.ns}}); err != nil {
		t.Fatal(err)
	}
	h.gone(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "layer"}})
	h.gone(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "base"}})
}

// TestPauseOfRestoredSandboxHoldsItsBase: the pause package of a sandbox
// restored from a snapshot holds that snapshot too.
func TestPauseOfRestoredSandboxHoldsItsBase(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("pdep-node", "8", "16Gi", nil)
	base := h.readySnapshot("pbase", "pdep-node", sandlotv1.RemoteNotApplicable, 512)
	h.running(newSandbox("sleeper", sandlotv1.SandboxSource{Snapshot: "pbase"}), "10.88.4.2")
	pkg := h.pause("sleeper")
	if d := pkg.Spec.DependsOn; d == nil || d.Name != "pbase" || d.UID != string(base.UID) {
		t.Fatalf("package dependsOn %+v", pkg.Spec.DependsOn)
	}
	if err := h.c.Delete(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "held by the package", func() error {
		got := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key("pbase"), got); err != nil {
			return err
		}
		if c := condition(got.Status.Conditions, sandlotv1.ConditionDeletionHeld); !strings.Contains(c.Message, "pausedsandbox sleeper") {
			return errorf("DeletionHeld %+v", c)
		}
		return nil
	})
}

// TestPackageHeldByWhatBuildsOnIt: a pause package's deletion (a resume's,
// a user's) waits while a Snapshot builds on its memory (one taken of the
// resumed sandbox before the package went), naming it; it goes after.
func TestPackageHeldByWhatBuildsOnIt(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("pk-node", "8", "16Gi", nil)
	h.readySnapshot("pkbase", "pk-node", sandlotv1.RemoteNotApplicable, 512)
	h.running(newSandbox("napper", sandlotv1.SandboxSource{Snapshot: "pkbase"}), "10.88.4.3")
	pkg := h.pause("napper")
	layer := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "resumed-layer"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Import: &sandlotv1.SnapshotImport{Location: "snapshots/y"}}}}
	h.create(layer)
	h.eventually(10*time.Second, "the imported layer assigned", func() error {
		if err := h.c.Get(context.Background(), h.key(layer.Name), layer); err != nil {
			return err
		}
		if layer.Status.NodeName == "" {
			return errorf("not assigned yet")
		}
		return nil
	})
	// What the controller records for a snapshot of a sandbox resumed from
	// the package (its pod's restore source), set here directly once the
	// assignment (which records none for an import) is done.
	orig := layer.DeepCopy()
	layer.Status.DependsOn = &sandlotv1.DataRef{Kind: sandlotv1.RestoreKindPausedSandbox, Name: pkg.Name, UID: string(pkg.UID)}
	if err := h.c.Status().Patch(context.Background(), layer, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(context.Background(), pkg); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "the package's deletion held by the snapshot", func() error {
		got := &sandlotv1.PausedSandbox{}
		if err := h.c.Get(context.Background(), h.key(pkg.Name), got); err != nil {
			return err
		}
		if c := condition(got.Status.Conditions, sandlotv1.ConditionDeletionHeld); !strings.Contains(c.Message, "snapshot resumed-layer") {
			return errorf("DeletionHeld %+v", c)
		}
		return nil
	})
	if err := h.c.Delete(context.Background(), layer); err != nil {
		t.Fatal(err)
	}
	h.gone(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "resumed-layer"}})
	// The sandbox still asks to be paused, so the controller may make it a
	// new package of the same name: the held one is what must go.
	h.gone(&sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: pkg.Name, UID: pkg.UID}})
}

// TestSnapshotExpiry: a Snapshot with expireAfterSeconds reports when it
// expires and is deleted then.
func TestSnapshotExpiry(t *testing.T) {
	h := newHarness(t)
	startController(t)
	h.addNode("exp-node", "8", "16Gi", nil)
	h.create(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "brief"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Import: &sandlotv1.SnapshotImport{Location: "snapshots/x"}},
			ExpireAfterSeconds: ptr.To[int64](2)}})
	h.eventually(10*time.Second, "expiresAt reported", func() error {
		got := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key("brief"), got); err != nil {
			return err
		}
		if got.Status.ExpiresAt == nil || !got.Status.ExpiresAt.Time.Equal(got.CreationTimestamp.Add(2*time.Second)) {
			return errorf("expiresAt %v, created %v", got.Status.ExpiresAt, got.CreationTimestamp)
		}
		return nil
	})
	h.gone(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "brief"}})
}

// hasEvent finds an Event with reason about the object of that UID.
func (h *harness) hasEvent(uid types.UID, reason string) error {
	list := &eventsv1.EventList{}
	if err := h.c.List(context.Background(), list, client.InNamespace(h.ns)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Regarding.UID == uid && e.Reason == reason {
			return nil
		}
	}
	return errorf("no %s event among %d", reason, len(list.Items))
}

// staleCache is a cache that has not seen anything yet: its lists are
// empty, as a cache's are for a write a moment old.
type staleCache struct{ client.Client }

func (staleCache) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// TestBuildsOnConfirmsPastTheCache: a dependent the cache has not seen
// yet still holds the data it builds on (the release that follows "none"
// deletes the data for good; CI once saw a package let go that way).
func TestBuildsOnConfirmsPastTheCache(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	layer := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "fresh-layer"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Import: &sandlotv1.SnapshotImport{Location: "snapshots/z"}}}}
	h.create(layer)
	orig := layer.DeepCopy()
	layer.Status.DependsOn = &sandlotv1.DataRef{Kind: sandlotv1.RestoreKindPausedSandbox, Name: "pkg", UID: "u1"}
	if err := h.c.Status().Patch(ctx, layer, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	// The CRDs let the API server filter by it: a release reads only the dependents.
	for _, l := range []struct {
		list  client.ObjectList
		field string
	}{{&sandlotv1.SnapshotList{}, "status.dependsOn.name"}, {&sandlotv1.PausedSandboxList{}, "spec.dependsOn.name"}} {
		if err := h.c.List(ctx, l.list, client.InNamespace(h.ns), client.MatchingFields{l.field: "pkg"}); err != nil {
			t.Fatalf("list by %s: %v", l.field, err)
		}
	}
	stale := staleCache{h.c}
	names, err := data.BuildsOn(ctx, stale, h.c, h.ns, sandlotv1.RestoreKindPausedSandbox, "pkg", "u1")
	if err != nil || len(names) != 1 || names[0] != "snapshot fresh-layer" {
		t.Fatalf("builds on pkg: %v, %v; want the snapshot the cache has not seen", names, err)
	}
	if names, err := data.BuildsOn(ctx, stale, h.c, h.ns, sandlotv1.RestoreKindPausedSandbox, "pkg", "u2"); err != nil || len(names) != 0 {
		t.Fatalf("builds on a package of another UID: %v, %v; want none", names, err)
	}
}
