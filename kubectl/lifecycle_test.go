package kubectl

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestPauseWaitReportsThePausedSandbox(t *testing.T) {
	f, ns := setup(t)
	sbx := f.sandbox(t, ns, "box", nil)
	f.running(t, sbx, "node-1", "10.0.0.2")

	cmd := f.start(ns, "pause", "box", "--wait")
	f.waitSpec(t, ns, "box", sbx, "spec.paused is true", func(s sandlotv1.SandboxSpec) bool { return s.Paused })
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.Phase, s.Status.Reason, s.Status.Message = sandlotv1.SandboxPausing, sandlotv1.ReasonPausing, "waiting for the node agent to save the VM"
	})
	cmd.shows(t, "sandbox/box: phase Pausing on node-1, Pausing: waiting for the node agent to save the VM")
	f.pausedSandbox(t, sbx, "node-1", sandlotv1.RemoteInProgress, 300<<20)
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.Phase, s.Status.Reason, s.Status.PodIP = sandlotv1.SandboxPaused, sandlotv1.ReasonPaused, ""
	})
	res := cmd.wait(t, 10*time.Second)
	if res.err != nil {
		t.Fatalf("pause --wait: %v\n%s", res.err, res.errOut)
	}
	contains(t, "stdout", res.out, "sandbox/box pausing\n",
		"sandbox/box paused: pausedsandbox/box on node-1, remoteStatus InProgress, 300.0MiB (restorable on node-1 now, on other nodes once remoteStatus is Ready)")

	// Pausing a paused sandbox changes nothing and says so.
	res = f.ok(t, ns, "pause", "box")
	if res.out != "sandbox/box is already paused (phase Paused)\n" {
		t.Errorf("second pause: %q", res.out)
	}
}

func TestPauseWaitFailsWithTheControllersReason(t *testing.T) {
	f, ns := setup(t)
	sbx := f.sandbox(t, ns, "box", nil)
	f.running(t, sbx, "node-1", "10.0.0.2")
	// A failure of an earlier pause (older generation) does not count.
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.ObservedGeneration, s.Status.Reason, s.Status.Message = s.Generation, sandlotv1.ReasonPauseFailed, "old"
	})

	cmd := f.start(ns, "pause", "box", "--wait")
	f.waitSpec(t, ns, "box", sbx, "spec.paused is true", func(s sandlotv1.SandboxSpec) bool { return s.Paused })
	cmd.pending(t, 200*time.Millisecond, "the controller reports on this pause")
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.ObservedGeneration = s.Generation
		s.Status.Reason, s.Status.Message = sandlotv1.ReasonPauseFailed, "pausing failed: the shim refused"
	})
	wantError(t, cmd.wait(t, 10*time.Second).err, "pause of sandbox box failed: pausing failed: the shim refused")
}

func TestResumeWaitNeedsVMReadyOfTheNewGeneration(t *testing.T) {
	f, ns := setup(t)
	sbx := f.sandbox(t, ns, "box", func(s *sandlotv1.Sandbox) { s.Spec.Paused = true })
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.Phase, s.Status.NodeName = sandlotv1.SandboxPaused, "node-1"
		setVMReady(s, metav1.ConditionTrue, s.Generation) // the VM from before the pause
	})
	f.pausedSandbox(t, sbx, "node-1", sandlotv1.RemoteReady, 0)
	oldGen := sbx.Generation

	cmd := f.start(ns, "resume", "box", "--wait")
	f.waitSpec(t, ns, "box", sbx, "spec.paused is false", func(s sandlotv1.SandboxSpec) bool { return !s.Paused })
	if sbx.Generation <= oldGen {
		t.Fatalf("generation %d after resume, want > %d", sbx.Generation, oldGen)
	}
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.Phase, s.Status.NodeName, s.Status.PodIP = sandlotv1.SandboxRunning, "node-2", "10.0.2.2"
	})
	cmd.shows(t, "sandbox/box: phase Running on node-2, VMReady True (Restored, generation 1)")
	cmd.pending(t, 300*time.Millisecond, "VMReady of the resumed VM")
	f.running(t, sbx, "node-2", "10.0.2.2")

	res := cmd.wait(t, 10*time.Second)
	if res.err != nil {
		t.Fatalf("resume --wait: %v\n%s", res.err, res.errOut)
	}
	contains(t, "stdout", res.out,
		"resuming sandbox/box from pausedsandbox/box on node-1, remoteStatus Ready (restorable on any compatible node)",
		"sandbox/box ready: id "+sandboxID(sbx)+", node node-2, ip 10.0.2.2")

	res = f.ok(t, ns, "resume", "box")
	if res.out != "sandbox/box is not paused (phase Running)\n" {
		t.Errorf("second resume: %q", res.out)
	}
}

func TestRollbackWaitsForItsRequest(t *testing.T) {
	f, ns := setup(t)
	sbx := f.sandbox(t, ns, "box", nil)
	f.running(t, sbx, "node-1", "10.0.0.2")
	snapshotOf(t, f, ns, "s1", "box")

	cmd := f.start(ns, "rollback", "box", "--to", "s1", "--wait")
	f.waitSpec(t, ns, "box", sbx, "spec.rollback is set", func(s sandlotv1.SandboxSpec) bool { return s.Rollback != nil })
	if sbx.Spec.Rollback.Snapshot != "s1" || !strings.HasPrefix(sbx.Spec.Rollback.RequestID, "kubectl-") {
		t.Errorf("spec.rollback %+v", sbx.Spec.Rollback)
	}
	cmd.pending(t, 200*time.Millisecond, "the agent records the request")
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.LastRollbackRequestID = s.Spec.Rollback.RequestID
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionRolledBack, Status: metav1.ConditionTrue,
			ObservedGeneration: s.Generation, Reason: sandlotv1.ReasonRolledBack, Message: "restored in place from snapshot s1 in 12ms"})
	})
	res := cmd.wait(t, 10*time.Second)
	if res.err != nil {
		t.Fatalf("rollback --wait: %v\n%s", res.err, res.errOut)
	}
	contains(t, "stdout", res.out, "sandbox/box rollback to snapshot/s1 requested (request "+sbx.Spec.Rollback.RequestID+")",
		"sandbox/box rolled back to snapshot/s1: restored in place from snapshot s1 in 12ms")

	// Each rollback is a new request.
	first := sbx.Spec.Rollback.RequestID
	f.ok(t, ns, "rollback", "box", "--to", "s1")
	f.get(t, ns, "box", sbx)
	if sbx.Spec.Rollback.RequestID == first {
		t.Errorf("the second rollback reused request ID %s", first)
	}
}

func TestRollbackRefusedIsTheConditionsMessage(t *testing.T) {
	f, ns := setup(t)
	sbx := f.sandbox(t, ns, "box", nil)
	f.running(t, sbx, "node-1", "10.0.0.2")
	snapshotOf(t, f, ns, "other", "elsewhere")
	// A refusal of an earlier request (older generation) does not count.
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionRolledBack, Status: metav1.ConditionFalse,
			ObservedGeneration: s.Generation, Reason: sandlotv1.ReasonRollbackRefused, Message: "an old refusal"})
	})

	cmd := f.start(ns, "rollback", "box", "--to", "other", "--wait")
	f.waitSpec(t, ns, "box", sbx, "spec.rollback is set", func(s sandlotv1.SandboxSpec) bool { return s.Rollback != nil })
	cmd.pending(t, 200*time.Millisecond, "the agent answers this request")
	refusal := `snapshot other was taken of sandbox "elsewhere" (ID x), not of this one (ID y): a rollback restores one of the sandbox's own snapshots`
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionRolledBack, Status: metav1.ConditionFalse,
			ObservedGeneration: s.Generation, Reason: sandlotv1.ReasonRollbackRefused, Message: refusal})
	})
	wantError(t, cmd.wait(t, 10*time.Second).err, "rollback of sandbox box refused: "+refusal)

	f.fails(t, ns, []string{"rollback", "box"}, "--to is required")
	f.fails(t, ns, []string{"rollback", "box", "--to", "nope"}, "snapshot nope not found in namespace "+ns)
	f.fails(t, ns, []string{"rollback", "box", "--to", "other", "--wait", "--timeout", "500ms"},
		"timed out after 500ms waiting for sandbox/box to roll back", "raise --timeout")
}

func TestDeleteWaitsUntilGone(t *testing.T) {
	f, ns := setup(t)
	// The controller's finalizer holds a sandbox until its pod is gone.
	f.sandbox(t, ns, "held", func(s *sandlotv1.Sandbox) { s.Finalizers = []string{sandlotv1.FinalizerSandboxVM} })
	f.sandbox(t, ns, "free", nil)

	cmd := f.start(ns, "delete", "held", "free", "ghost", "--wait")
	cmd.shows(t, "sandbox/held: deleting")
	cmd.shows(t, "sandbox/free: gone")
	cmd.pending(t, 200*time.Millisecond, "the finalizer goes")
	held := &sandlotv1.Sandbox{}
	f.get(t, ns, "held", held)
	held.Finalizers = nil
	if err := f.c.Update(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	res := cmd.wait(t, 10*time.Second)
	wantError(t, res.err, "sandbox ghost not found in namespace "+ns)
	contains(t, "stdout", res.out, "sandbox/held deleted", "sandbox/free deleted")
	contains(t, "stderr", res.errOut, "sandbox/held: gone")
	if f.exists(t, ns, "held", &sandlotv1.Sandbox{}) || f.exists(t, ns, "free", &sandlotv1.Sandbox{}) {
		t.Error("a deleted sandbox is still there")
	}
}

func TestUnknownSandboxIsNamedWithItsNamespace(t *testing.T) {
	f, ns := setup(t)
	for _, args := range [][]string{{"pause", "nope"}, {"resume", "nope"}, {"rollback", "nope", "--to", "s"},
		{"exec", "nope", "--", "true"}, {"delete", "nope"}, {"snapshot", "nope"}} {
		f.fails(t, ns, args, "sandbox nope not found in namespace "+ns)
	}
}

func snapshotOf(t *testing.T, f *fixture, ns, name, sandbox string) *sandlotv1.Snapshot {
	t.Helper()
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: sandbox}}}
	if err := f.c.Create(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	return snap
}
