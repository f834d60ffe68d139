package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestRebuildHoldsBaseOfSnapshot: a snapshot of a sandbox restored from a
// template's base holds only the pages it changed, over that base. When
// the template is rebuilt (and the sandbox goes), the old base is deleted
// but held (DeletionHeld, naming the snapshot) instead of taking the
// snapshot's memory with it; a sandbox restored from the snapshot then
// has its state; and the base goes once nothing depends on it.
func TestRebuildHoldsBaseOfSnapshot(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "hold")
	src := sbxtest.Create(t, k, "hold", "hold-src")["hold-src"]
	base := src.Status.BaseSnapshot
	sbxtest.EnvdRun(t, k, src, sbxtest.WriteState)
	snap := sbxtest.Snapshot(t, k, "hold-snap", src.Name)
	if d := snap.Status.DependsOn; d == nil || d.Name != base {
		t.Fatalf("snapshot of a restored sandbox depends on %+v, want its base %s", d, base)
	}
	rebuild(t, k, "hold")
	sbxtest.Delete(t, k, src.Name)
	var old sandlotv1.Snapshot
	poll.Eventually(t, 3*time.Minute, "the old base deleted and held", func() error {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: base}, &old); err != nil {
			return poll.Stop(fmt.Errorf("old base %s: %w (it should be held)", base, err))
		}
		held := meta.FindStatusCondition(old.Status.Conditions, sandlotv1.ConditionDeletionHeld)
		if old.DeletionTimestamp == nil || held == nil || held.Status != "True" {
			return fmt.Errorf("deleted %v, DeletionHeld %+v", old.DeletionTimestamp, held)
		}
		return nil
	})
	t.Logf("old base %s held: %s", base, meta.FindStatusCondition(old.Status.Conditions, sandlotv1.ConditionDeletionHeld).Message)
	back := sbxtest.FromSnapshot(t, k, "hold-back", snap.Name)
	if got := sbxtest.EnvdRun(t, k, back, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("restored from the snapshot over the held base: %q, want %q", got, sbxtest.WantState)
	}
	sbxtest.Delete(t, k, back.Name)
	if err := k.Delete(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 3*time.Minute, "the old base gone with its last dependent", func() error {
		err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: base}, &old)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// rebuild changes the template's env (part of its revision) and waits for
// bases of the new revision on every node.
func rebuild(t *testing.T, k client.Client, name string) {
	t.Helper()
	var tpl sandlotv1.Template
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &tpl); err != nil {
		t.Fatal(err)
	}
	orig := tpl.DeepCopy()
	tpl.Spec.Env = append(tpl.Spec.Env, sandlotv1.EnvVar{Name: "REBUILT", Value: "1"})
	if err := k.Patch(context.Background(), &tpl, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, time.Minute, "the template's new revision", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(&tpl), &tpl); err != nil {
			return err
		}
		if tpl.Status.BaseRevision == orig.Status.BaseRevision {
			return fmt.Errorf("base revision still %s", orig.Status.BaseRevision)
		}
		return nil
	})
	if err := sbxtest.WaitBases(context.Background(), k, client.ObjectKeyFromObject(&tpl), len(c.Nodes), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
}
