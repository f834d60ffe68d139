package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// readySnapshot creates a Snapshot and plays the node agent: its data is
// Ready on node.
func (h *harness) readySnapshot(name, node string, remote sandlotv1.RemoteStatus, memMiB int32) *sandlotv1.Snapshot {
	h.t.Helper()
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Import: &sandlotv1.SnapshotImport{Location: "store://" + name, NodeName: node}}}}
	h.create(snap)
	h.eventually(10*time.Second, "snapshot assigned", func() error {
		if err := h.c.Get(context.Background(), h.key(name), snap); err != nil {
			return err
		}
		if snap.Status.NodeName != node || snap.Labels[sandlotv1.LabelNode] != node {
			return fmt.Errorf("status node %q, labels %v", snap.Status.NodeName, snap.Labels)
		}
		return nil
	})
	h.setSnapshot(name, func(st *sandlotv1.SnapshotStatus) {
		st.Phase, st.Location, st.RemoteStatus = sandlotv1.DataReady, "store://"+name, remote
		st.VM = sandlotv1.VMSpec{Image: "docker.io/library/python:3.12", Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: memMiB}, WritableLayerMiB: 1024}
	})
	return snap
}

// setSnapshot plays the node agent writing a Snapshot's status.
func (h *harness) setSnapshot(name string, mutate func(*sandlotv1.SnapshotStatus)) {
	h.t.Helper()
	h.eventually(5*time.Second, "update snapshot "+name, func() error {
		snap := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key(name), snap); err != nil {
			return err
		}
		mutate(&snap.Status)
		return h.c.Status().Update(context.Background(), snap)
	})
}

// TestPlacementPrefersSnapshotNodeAndRespectsCapacity, on two nodes.
func TestPlacementPrefersSnapshotNodeAndRespectsCapacity(t *testing.T) {
	h := newHarness(t)
	startController(t)
	// node-a is the smaller one; overhead (96Mi) + 512Mi per sandbox: 3 fit in 2Gi.
	h.addNode("cap-node-a", "8", "2Gi", nil)
	h.addNode("cap-node-b", "8", "16Gi", nil)
	h.readySnapshot("snap", "cap-node-a", sandlotv1.RemoteInProgress, 512)

	for i := range 3 {
		name := fmt.Sprintf("clone-%d", i)
		h.create(newSandbox(name, sandlotv1.SandboxSource{Snapshot: "snap"}))
		if s := h.waitPhase(name, sandlotv1.SandboxStarting); s.Status.NodeName != "cap-node-a" {
			t.Fatalf("%s placed on %q, want the snapshot's node", name, s.Status.NodeName)
		}
		pod := h.pod(name)
		if pod.Annotations[sandlotv1.AnnotationBoot] != sandlotv1.BootRestore ||
			pod.Annotations[sandlotv1.AnnotationRestoreKind] != "Snapshot" ||
			pod.Annotations[sandlotv1.AnnotationRestoreLocation] != "store://snap" {
			t.Fatalf("restore annotations = %v", pod.Annotations)
		}
	}
	// The snapshot's node is full and the data is not remote-ready: wait.
	h.create(newSandbox("clone-3", sandlotv1.SandboxSource{Snapshot: "snap"}))
	h.eventually(10*time.Second, "clone-3 pending", func() error {
		s := h.sandbox("clone-3")
		c := condition(s.Status.Conditions, sandlotv1.ConditionScheduled)
		if s.Status.Phase != sandlotv1.SandboxPending || c.Status != metav1.ConditionFalse {
			return errorf("status %+v", s.Status)
		}
		return nil
	})
	msg := condition(h.sandbox("clone-3").Status.Conditions, sandlotv1.ConditionScheduled).Message
	mustContain(t, "message", msg, "1 insufficient memory")
	mustContain(t, "message", msg, "1 source data is local to cap-node-a")

	// Once the data is remote Ready, another node may restore it.
	h.setSnapshot("snap", func(st *sandlotv1.SnapshotStatus) { st.RemoteStatus = sandlotv1.RemoteReady })
	if s := h.waitPhase("clone-3", sandlotv1.SandboxStarting); s.Status.NodeName != "cap-node-b" {
		t.Fatalf("clone-3 placed on %q, want cap-node-b", s.Status.NodeName)
	}
}

// TestPauseAndResume: paused → PausedSandbox (owned) → package Ready → pod
// gone → Paused; unpaused → a pod restoring the package → Running with
// the same ID, package released.
func TestPauseAndResume(t *testing.T) {
	h := withController(t, "pause-node", 512)
	before := h.running(newSandbox("nap", sandlotv1.SandboxSource{Template: "python"}), "10.88.1.1")

	pkg := h.pause("nap")
	if !metav1.IsControlledBy(pkg, before) || pkg.Spec.SandboxID != before.Status.SandboxID ||
		pkg.Labels[sandlotv1.LabelNode] != "pause-node" || pkg.Spec.VM.Resources.MemoryMiB != 512 {
		t.Fatalf("paused sandbox = %+v", pkg)
	}
	// The package is created first and the phase set in the same
	// reconcile's status patch, right after: read it once it is there.
	h.waitPhase("nap", sandlotv1.SandboxPausing)
	h.pod("nap") // the VM stays until its package is Ready
	h.finishPause("nap")
	h.gone(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nap"}})
	paused := h.waitPhase("nap", sandlotv1.SandboxPaused)
	if paused.Status.SandboxID != before.Status.SandboxID || paused.Status.NodeName != "" {
		t.Fatalf("paused status = %+v", paused.Status)
	}

	h.editSpec("nap", func(spec *sandlotv1.SandboxSpec) { spec.Paused = false })
	h.waitPhase("nap", sandlotv1.SandboxResuming)
	pod := h.pod("nap")
	if pod.Annotations[sandlotv1.AnnotationRestoreKind] != "PausedSandbox" ||
		pod.Annotations[sandlotv1.AnnotationRestoreLocation] != "store://paused/nap" ||
		pod.Annotations[sandlotv1.AnnotationSandboxID] != before.Status.SandboxID {
		t.Fatalf("resume pod annotations = %v", pod.Annotations)
	}
	h.setPod("nap", corev1.PodRunning, "10.88.1.2")
	after := h.waitPhase("nap", sandlotv1.SandboxRunning)
	if after.Status.SandboxID != before.Status.SandboxID || after.Status.PodIP != "10.88.1.2" {
		t.Fatalf("resumed status = %+v", after.Status)
	}
	h.gone(&sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: "nap"}})
}

// pause sets spec.paused and returns the PausedSandbox the controller makes.
func (h *harness) pause(name string) *sandlotv1.PausedSandbox {
	h.t.Helper()
	h.editSpec(name, func(spec *sandlotv1.SandboxSpec) { spec.Paused = true })
	pkg := &sandlotv1.PausedSandbox{}
	h.eventually(10*time.Second, "paused sandbox "+name, func() error {
		if err := h.c.Get(context.Background(), h.key(name), pkg); err != nil {
			return err
		}
		if pkg.Status.Phase != sandlotv1.DataPending {
			return errorf("phase %q", pkg.Status.Phase)
		}
		return nil
	})
	return pkg
}

// finishPause plays the node agent: the pause package is Ready.
func (h *harness) finishPause(name string) {
	h.t.Helper()
	h.eventually(5*time.Second, "package ready", func() error {
		pkg := &sandlotv1.PausedSandbox{}
		if err := h.c.Get(context.Background(), h.key(name), pkg); err != nil {
			return err
		}
		pkg.Status.Phase, pkg.Status.Location = sandlotv1.DataReady, "store://paused/"+name
		pkg.Status.RemoteStatus = sandlotv1.RemoteNotApplicable
		return h.c.Status().Update(context.Background(), pkg)
	})
}

// TestDeletingPausedSandboxFailsSandbox: the paused state is discarded.
func TestDeletingPausedSandboxFailsSandbox(t *testing.T) {
	h := withController(t, "discard-node", 512)
	h.running(newSandbox("lost", sandlotv1.SandboxSource{Template: "python"}), "10.88.2.1")
	paused := &corev1.Pod{}
	if err := h.c.Get(context.Background(), h.key("lost"), paused); err != nil {
		t.Fatal(err)
	}
	pkg := h.pause("lost")
	h.finishPause("lost")
	h.waitPhase("lost", sandlotv1.SandboxPaused)

	if err := h.c.Delete(context.Background(), pkg); err != nil {
		t.Fatal(err)
	}
	s := h.waitPhase("lost", sandlotv1.SandboxFailed)
	if s.Status.Reason != sandlotv1.ReasonPausedStateDiscarded {
		t.Fatalf("reason = %q", s.Status.Reason)
	}
	h.gone(&sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: "lost"}})
	// Unpausing a failed sandbox starts nothing.
	h.editSpec("lost", func(spec *sandlotv1.SandboxSpec) { spec.Paused = false })
	h.consistently(time.Second, "no pod", func() error {
		// The paused pod may still be going (Paused comes first; nothing
		// plays the kubelet's last delete here): any other is new.
		pod := &corev1.Pod{}
		if err := h.c.Get(context.Background(), h.key("lost"), pod); err == nil &&
			(pod.UID != paused.UID || pod.DeletionTimestamp == nil) {
			return errorf("a pod was created for a failed sandbox")
		}
		return nil
	})
}

// TestSnapshotOfRunningSandbox: the controller labels it with the node
// that must act and records what a restore needs; Pending for the agent.
func TestSnapshotOfRunningSandbox(t *testing.T) {
	h := newHarness(t)
	startController(t)
	h.addNode("snap-node", "8", "16Gi", nil)
	h.template("python", 768)
	h.create(newSandbox("origin", sandlotv1.SandboxSource{Template: "python"}))
	h.create(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "early"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "origin"}}})
	h.eventually(10*time.Second, "waits for the sandbox to run", func() error {
		snap := &sandlotv1.Snapshot{}
		_ = h.c.Get(context.Background(), h.key("early"), snap)
		if c := condition(snap.Status.Conditions, sandlotv1.ConditionScheduled); c.Reason != sandlotv1.ReasonSandboxNotRunning {
			return errorf("status %+v", snap.Status)
		}
		return nil
	})
	h.waitPhase("origin", sandlotv1.SandboxStarting)
	h.setPod("origin", corev1.PodRunning, "10.88.3.1")
	s := h.waitPhase("origin", sandlotv1.SandboxRunning)
	h.eventually(10*time.Second, "snapshot assigned", func() error {
		snap := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key("early"), snap); err != nil {
			return err
		}
		st := snap.Status
		if snap.Labels[sandlotv1.LabelNode] != "snap-node" || st.NodeName != "snap-node" || st.Phase != sandlotv1.DataPending ||
			st.SandboxID != s.Status.SandboxID || st.Template != "python" || st.VM.Resources.MemoryMiB != 768 ||
			st.VM.Image != "docker.io/library/python:3.12" {
			return errorf("labels %v status %+v", snap.Labels, st)
		}
		if !containsString(snap.Finalizers, sandlotv1.FinalizerInUse) {
			return errorf("finalizers %v", snap.Finalizers)
		}
		return nil
	})
	// A snapshot of a sandbox that does not exist fails, saying so.
	h.create(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "orphan"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "nobody"}}})
	h.eventually(10*time.Second, "orphan fails", func() error {
		snap := &sandlotv1.Snapshot{}
		_ = h.c.Get(context.Background(), h.key("orphan"), snap)
		if snap.Status.Phase != sandlotv1.DataFailed || condition(snap.Status.Conditions, sandlotv1.ConditionReady).Reason != sandlotv1.ReasonSourceNotFound {
			return errorf("status %+v", snap.Status)
		}
		return nil
	})
}

// TestSnapshotDeletionHeldWhileRestoring.
func TestSnapshotDeletionHeldWhileRestoring(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("hold-node", "8", "16Gi", nil)
	snap := h.readySnapshot("base", "hold-node", sandlotv1.RemoteNotApplicable, 512)
	h.create(newSandbox("user", sandlotv1.SandboxSource{Snapshot: "base"}))
	h.waitPhase("user", sandlotv1.SandboxStarting)
	if err := h.c.Delete(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "deletion held", func() error {
		got := &sandlotv1.Snapshot{}
		if err := h.c.Get(context.Background(), h.key("base"), got); err != nil {
			return err
		}
		if c := condition(got.Status.Conditions, sandlotv1.ConditionDeletionHeld); c.Status != metav1.ConditionTrue {
			return errorf("conditions %v", got.Status.Conditions)
		}
		return nil
	})
	h.consistently(time.Second, "snapshot kept", func() error {
		return h.c.Get(context.Background(), h.key("base"), &sandlotv1.Snapshot{})
	})
	if err := h.c.Delete(context.Background(), h.sandbox("user")); err != nil {
		t.Fatal(err)
	}
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "user"}})
	h.gone(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "base"}})
}

// TestRestartConverges: a controller stopped mid-flight and started again
// makes exactly one pod per sandbox.
func TestRestartConverges(t *testing.T) {
	h := newHarness(t)
	h.addNode("restart-node", "64", "256Gi", nil)
	stop := startController(t)
	h.template("python", 512)
	const n = 8
	for i := range n {
		h.create(newSandbox(fmt.Sprintf("r-%d", i), sandlotv1.SandboxSource{Template: "python"}))
	}
	// Stopped once the first is reconciled: mid-flight, the rest likely not.
	h.eventually(10*time.Second, "a first sandbox reconciled", func() error {
		for i := range n {
			if h.sandbox(fmt.Sprintf("r-%d", i)).Status.Phase != "" {
				return nil
			}
		}
		return errorf("none reconciled yet")
	})
	stop()
	startController(t)
	for i := range n {
		h.waitPhase(fmt.Sprintf("r-%d", i), sandlotv1.SandboxStarting)
	}
	h.consistently(time.Second, "one pod per sandbox", func() error {
		pods := &corev1.PodList{}
		if err := h.c.List(context.Background(), pods, client.InNamespace(h.ns)); err != nil {
			return err
		}
		perSandbox, total := map[string]int{}, 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Labels[sandlotv1.LabelSandbox], "r-") { // not the template's builder
				perSandbox[p.Labels[sandlotv1.LabelSandbox]]++
				total++
			}
		}
		if total != n || len(perSandbox) != n {
			return errorf("%d pods for %d sandboxes: %v", total, len(perSandbox), perSandbox)
		}
		return nil
	})
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestResumeRestartsTimeout: a paused sandbox outlives its timeout; resumed,
// its clock starts again from the resume (E2B semantics), then it expires.
func TestResumeRestartsTimeout(t *testing.T) {
	h := withController(t, "timeout-node", 512)
	sbx := newSandbox("sleeper", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.TimeoutSeconds = ptr.To[int32](4)
	h.running(sbx, "10.88.4.1")
	h.pause("sleeper")
	h.finishPause("sleeper")
	h.waitPhase("sleeper", sandlotv1.SandboxPaused)
	created := h.sandbox("sleeper").CreationTimestamp
	// Still here past its timeout: paused sandboxes do not expire.
	h.consistently(time.Until(created.Add(5*time.Second)), "paused past its timeout", func() error {
		if p := h.sandbox("sleeper").Status.Phase; p != sandlotv1.SandboxPaused {
			return errorf("phase %s", p)
		}
		return nil
	})
	h.editSpec("sleeper", func(spec *sandlotv1.SandboxSpec) { spec.Paused = false })
	h.waitPhase("sleeper", sandlotv1.SandboxResuming)
	h.setPod("sleeper", corev1.PodRunning, "10.88.4.2")
	h.eventually(10*time.Second, "resumed with a new expiry", func() error {
		s := h.sandbox("sleeper")
		if s.Status.Phase != sandlotv1.SandboxRunning || s.Status.LastResumedAt == nil ||
			!s.Status.ExpiresAt.Equal(ptr.To(metav1.NewTime(s.Status.LastResumedAt.Add(4*time.Second)))) {
			return errorf("status %+v", s.Status)
		}
		return nil
	})
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sleeper"}})
}

// TestResumeByBoot: spec.resumeBy Boot resumes on the package's disk (the
// pod says boot "disk"), in a pod of its own, never a pool claim.
func TestResumeByBoot(t *testing.T) {
	h := withController(t, "boot-node", 512)
	before := h.running(newSandbox("reboot", sandlotv1.SandboxSource{Template: "python"}), "10.88.2.1")
	h.editSpec("reboot", func(spec *sandlotv1.SandboxSpec) {
		spec.Paused, spec.ResumeBy = true, sandlotv1.ResumeBoot
	})
	h.finishPause("reboot")
	h.gone(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "reboot"}})
	h.waitPhase("reboot", sandlotv1.SandboxPaused)
	h.editSpec("reboot", func(spec *sandlotv1.SandboxSpec) { spec.Paused = false })
	pod := h.pod("reboot")
	if pod.Annotations[sandlotv1.AnnotationBoot] != sandlotv1.BootDisk ||
		pod.Annotations[sandlotv1.AnnotationRestoreKind] != "PausedSandbox" ||
		pod.Annotations[sandlotv1.AnnotationSandboxID] != before.Status.SandboxID {
		t.Fatalf("resume pod annotations = %v", pod.Annotations)
	}
	h.setPod("reboot", corev1.PodRunning, "10.88.2.2")
	if after := h.waitPhase("reboot", sandlotv1.SandboxRunning); after.Status.SandboxID != before.Status.SandboxID {
		t.Fatalf("resumed status = %+v", after.Status)
	}
}
