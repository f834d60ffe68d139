package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent"
)

// requestRollback asks for a rollback as kubectl would (a merge patch of
// the spec: the agent writes the status meanwhile).
func (a *agent) requestRollback(sbx *sandlotv1.Sandbox, snapshot, requestID string) {
	a.t.Helper()
	if err := a.get(sbx); err != nil {
		a.t.Fatal(err)
	}
	base := sbx.DeepCopy()
	sbx.Spec.Rollback = &sandlotv1.RollbackRequest{Snapshot: snapshot, RequestID: requestID}
	if err := a.c.Patch(context.Background(), sbx, client.MergeFrom(base)); err != nil {
		a.t.Fatalf("request rollback %s: %v", requestID, err)
	}
}

// waitRolledBack waits for the sandbox's RolledBack condition.
func (a *agent) waitRolledBack(sbx *sandlotv1.Sandbox, status metav1.ConditionStatus, reason string) {
	a.t.Helper()
	a.eventually("RolledBack "+string(status)+" "+reason, func() error {
		if err := a.get(sbx); err != nil {
			return err
		}
		c := condition(sbx.Status.Conditions, sandlotv1.ConditionRolledBack)
		if c.ObservedGeneration != sbx.Generation {
			return fmt.Errorf("RolledBack is of generation %d, the request's is %d", c.ObservedGeneration, sbx.Generation)
		}
		return hasCondition(sbx.Status.Conditions, sandlotv1.ConditionRolledBack, status, reason)
	})
}

// TestRollbackRestoresInPlace: a rollback the shim fails is RollbackFailed
// with a Warning Event and no request ID recorded; the next request
// restores the pod's VM from the snapshot's directory in the store,
// records lastRollbackRequestID with the agent's rollback field manager,
// and an Event says so.
func TestRollbackRestoresInPlace(t *testing.T) {
	a := startAgent(t, nil)
	sbx, _, vm := a.runningSandbox("rolled", "rolledsandbox0000001")
	snap := a.snapshot("rolled-1", sbx)
	dir := a.waitSnapshot(snap, sandlotv1.DataReady).Location

	vm.set(func(v *fakeVM) { v.restoreErr = errors.New("QEMU exited during the restore") })
	a.requestRollback(sbx, snap.Name, "r1")
	a.waitRolledBack(sbx, metav1.ConditionFalse, sandlotv1.ReasonRollbackFailed)
	if sbx.Status.LastRollbackRequestID != "" {
		t.Fatalf("lastRollbackRequestID = %q after a failed rollback", sbx.Status.LastRollbackRequestID)
	}
	a.waitEvent(sbx, corev1.EventTypeWarning, sandlotv1.ReasonRollbackFailed, "QEMU exited during the restore")

	vm.set(func(v *fakeVM) { v.restoreErr = nil })
	a.requestRollback(sbx, snap.Name, "r2")
	a.eventually("lastRollbackRequestID r2", func() error {
		if err := a.get(sbx); err != nil {
			return err
		}
		if sbx.Status.LastRollbackRequestID != "r2" {
			return fmt.Errorf("lastRollbackRequestID %q", sbx.Status.LastRollbackRequestID)
		}
		return nil
	})
	a.waitRolledBack(sbx, metav1.ConditionTrue, sandlotv1.ReasonRolledBack)
	if err := appliedBy(sbx, nodeagent.RollbackFieldManager, `"f:lastRollbackRequestID"`); err != nil {
		t.Fatal(err)
	}
	if _, _, _, restores := vm.calls(); len(restores) == 0 || slices.IndexFunc(restores, func(d string) bool { return d != dir }) >= 0 {
		t.Fatalf("shim asked to restore from %v, want the snapshot's directory %s", restores, dir)
	}
	a.waitEvent(sbx, corev1.EventTypeNormal, sandlotv1.ReasonRolledBack, "request r2")
	// Each restore names its request: the shim does a request once, however
	// often a stale cache reconciles it.
	vm.mu.Lock()
	ids := slices.Clone(vm.restoreIDs)
	vm.mu.Unlock()
	if len(ids) == 0 || ids[len(ids)-1] != "r2" {
		t.Fatalf("restore request IDs %q, want the last to be r2", ids)
	}
}
