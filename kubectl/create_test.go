package kubectl

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

func TestCreateWritesTheSandbox(t *testing.T) {
	f, ns := setup(t)
	f.template(t, ns, "python")

	res := f.ok(t, ns, "create", "--template", "python", "box", "--lifetime", "10m", "--metadata", "owner=me",
		"--metadata", "team=ml", "--env", "DEBUG=1", "--env", "PATH=/x", "--env", "DEBUG=2")
	sbx := &sandlotv1.Sandbox{}
	f.get(t, ns, "box", sbx)
	if res.out != "sandbox/box created (id "+sandboxID(sbx)+")\n" {
		t.Errorf("stdout %q", res.out)
	}
	if sbx.Spec.Source.Template != "python" || *sbx.Spec.TimeoutSeconds != 600 ||
		sbx.Spec.Metadata["owner"] != "me" || sbx.Spec.Metadata["team"] != "ml" {
		t.Errorf("spec %+v", sbx.Spec)
	}
	// Created with the controller's finalizer: no update of the
	// controller's to add it (a write on every start's path).
	if !slices.Equal(sbx.Finalizers, []string{sandlotv1.FinalizerSandboxVM}) {
		t.Errorf("finalizers %v, want the controller's", sbx.Finalizers)
	}
	want := []sandlotv1.EnvVar{{Name: "DEBUG", Value: "2"}, {Name: "PATH", Value: "/x"}}
	if len(sbx.Spec.Env) != 2 || sbx.Spec.Env[0] != want[0] || sbx.Spec.Env[1] != want[1] {
		t.Errorf("env %+v, want %+v (a repeated name keeps its place and takes the last value)", sbx.Spec.Env, want)
	}

	// Without a name, one is generated from the template's; --lifetime
	// takes seconds too.
	res = f.ok(t, ns, "create", "--template", "python", "--lifetime", "601")
	name, ok := strings.CutPrefix(strings.Fields(res.out)[0], "sandbox/python-")
	if !ok {
		t.Fatalf("generated name: %q", res.out)
	}
	f.get(t, ns, "python-"+name, sbx)
	if *sbx.Spec.TimeoutSeconds != 601 {
		t.Errorf("--lifetime 601: timeoutSeconds %d", *sbx.Spec.TimeoutSeconds)
	}

	f.fails(t, ns, []string{"create", "--template", "nope"}, "template nope not found in namespace "+ns)
	f.fails(t, ns, []string{"create", "--template", "python", "box"}, "sandbox box already exists in namespace "+ns)
}

func TestCreateWaitFollowsStatusUntilUsable(t *testing.T) {
	f, ns := setup(t)
	f.template(t, ns, "python")

	cmd := f.start(ns, "create", "--template", "python", "box", "--wait")
	sbx := &sandlotv1.Sandbox{}
	f.waitExists(t, ns, "box", sbx)
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.Phase, s.Status.NodeName = sandlotv1.SandboxStarting, "node-1"
		s.Status.Reason, s.Status.Message = sandlotv1.ReasonPodPending, "waiting for the pod"
	})
	cmd.shows(t, "sandbox/box: phase Starting on node-1, PodPending: waiting for the pod")
	// Running with an IP but no VMReady yet is not usable.
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.Phase, s.Status.PodIP, s.Status.Reason, s.Status.Message = sandlotv1.SandboxRunning, "10.0.0.9", "", ""
	})
	cmd.shows(t, "sandbox/box: phase Running on node-1\n")
	cmd.pending(t, 200*time.Millisecond, "VMReady")
	f.running(t, sbx, "node-1", "10.0.0.9")

	res := cmd.wait(t, 10*time.Second)
	if res.err != nil {
		t.Fatalf("create --wait: %v\n%s", res.err, res.errOut)
	}
	contains(t, "stdout", res.out, "sandbox/box created", "sandbox/box ready: id "+sandboxID(sbx)+", node node-1, ip 10.0.0.9")
	contains(t, "stderr", res.errOut, "VMReady True (Restored, generation 1)")
}

func TestCreateWaitFailsOnTimeoutAndOnFailure(t *testing.T) {
	f, ns := setup(t)
	f.template(t, ns, "python")

	start := time.Now()
	res := f.fails(t, ns, []string{"create", "--template", "python", "slow", "--wait", "--timeout", "1s"},
		"timed out after 1s waiting for sandbox/slow to be usable", "last seen: sandbox/slow: phase <none>", "raise --timeout")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a 1s wait took %v", took)
	}
	contains(t, "stdout", res.out, "sandbox/slow created")

	cmd := f.start(ns, "create", "--template", "python", "doomed", "--wait")
	sbx := &sandlotv1.Sandbox{}
	f.waitExists(t, ns, "doomed", sbx)
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.Phase, s.Status.Reason, s.Status.Message = sandlotv1.SandboxFailed, sandlotv1.ReasonPodFailed, "the VM did not start"
	})
	wantError(t, cmd.wait(t, 10*time.Second).err, "sandbox doomed failed: PodFailed: the VM did not start")
}

func TestSnapshotWaitShowsRemoteStatus(t *testing.T) {
	f, ns := setup(t)
	f.running(t, f.sandbox(t, ns, "box", nil), "node-1", "10.0.0.2")

	cmd := f.start(ns, "snapshot", "box", "--name", "s1", "--wait", "--wait-remote")
	snap := &sandlotv1.Snapshot{}
	f.waitExists(t, ns, "s1", snap)
	if snap.Spec.Source.Sandbox != "box" {
		t.Errorf("snapshot source %+v", snap.Spec.Source)
	}
	setStatus(t, f, snap, func(s *sandlotv1.Snapshot) {
		s.Status.Phase, s.Status.NodeName, s.Status.RemoteStatus = sandlotv1.DataCreating, "node-1", sandlotv1.RemotePending
	})
	cmd.shows(t, "snapshot/s1: phase Creating on node-1, remoteStatus Pending")
	setStatus(t, f, snap, func(s *sandlotv1.Snapshot) {
		s.Status.Phase, s.Status.RemoteStatus, s.Status.TotalBytes = sandlotv1.DataReady, sandlotv1.RemoteInProgress, 64<<20
	})
	cmd.shows(t, "snapshot/s1: phase Ready on node-1, remoteStatus InProgress")
	cmd.pending(t, 200*time.Millisecond, "remoteStatus Ready (--wait-remote)")
	setStatus(t, f, snap, func(s *sandlotv1.Snapshot) { s.Status.RemoteStatus = sandlotv1.RemoteReady })

	res := cmd.wait(t, 10*time.Second)
	if res.err != nil {
		t.Fatalf("snapshot --wait: %v", res.err)
	}
	contains(t, "stdout", res.out, "snapshot/s1 created from sandbox/box",
		"snapshot/s1 ready on node-1, remoteStatus Ready, 64.0MiB (restorable on any compatible node)")
}

func TestSnapshotWaitEndsAtReadyWithRemoteStatus(t *testing.T) {
	f, ns := setup(t)
	f.running(t, f.sandbox(t, ns, "box", nil), "node-1", "10.0.0.2")

	cmd := f.start(ns, "snapshot", "box", "--wait")
	snap := f.onlySnapshot(t, ns, "a snapshot exists")
	if !strings.HasPrefix(snap.Name, "box-") {
		t.Errorf("generated snapshot name %q", snap.Name)
	}
	setStatus(t, f, snap, func(s *sandlotv1.Snapshot) {
		s.Status.Phase, s.Status.NodeName, s.Status.RemoteStatus = sandlotv1.DataReady, "node-1", sandlotv1.RemoteInProgress
	})
	res := cmd.wait(t, 10*time.Second)
	if res.err != nil {
		t.Fatalf("snapshot --wait: %v", res.err)
	}
	contains(t, "stdout", res.out, "snapshot/"+snap.Name+" ready on node-1, remoteStatus InProgress (restorable on node-1 now, on other nodes once remoteStatus is Ready)")
}

func TestSnapshotFailuresAndRefusals(t *testing.T) {
	f, ns := setup(t)
	f.running(t, f.sandbox(t, ns, "box", nil), "node-1", "10.0.0.2")
	f.sandbox(t, ns, "sleepy", func(s *sandlotv1.Sandbox) { s.Spec.Paused = true })

	cmd := f.start(ns, "snapshot", "box", "--name", "bad", "--wait")
	snap := &sandlotv1.Snapshot{}
	f.waitExists(t, ns, "bad", snap)
	setStatus(t, f, snap, func(s *sandlotv1.Snapshot) {
		s.Status.Phase = sandlotv1.DataFailed
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionReady,
			Status: metav1.ConditionFalse, Reason: "SaveFailed", Message: "disk full"})
	})
	wantError(t, cmd.wait(t, 10*time.Second).err, "snapshot bad failed: SaveFailed: disk full")

	f.fails(t, ns, []string{"snapshot", "sleepy"}, "sandbox sleepy is paused: resume it first")
	f.fails(t, ns, []string{"snapshot", "nope"}, "sandbox nope not found in namespace "+ns)
	f.fails(t, ns, []string{"snapshot", "box", "--name", "bad"}, "snapshot bad already exists")
	f.fails(t, ns, []string{"snapshot", "box", "--wait-remote"}, "--wait-remote needs --wait")
}

func TestCloneFromSnapshot(t *testing.T) {
	f, ns := setup(t)
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: ns},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "gone"}}}
	if err := f.c.Create(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	res := f.ok(t, ns, "clone", "s1", "--count", "3")
	list := &sandlotv1.SandboxList{}
	f.list(t, ns, list)
	if len(list.Items) != 3 {
		t.Fatalf("%d sandboxes, want 3", len(list.Items))
	}
	for _, s := range list.Items {
		if s.Spec.Source.Snapshot != "s1" || !strings.HasPrefix(s.Name, "s1-") {
			t.Errorf("clone %s: source %+v", s.Name, s.Spec.Source)
		}
		contains(t, "stdout", res.out, "sandbox/"+s.Name+" created from snapshot/s1 (id "+sandboxID(&s)+")")
	}
	f.fails(t, ns, []string{"clone", "nope"}, "no snapshot or sandbox named nope in namespace "+ns)
	f.fails(t, ns, []string{"clone", "snapshot/nope"}, "snapshot nope not found in namespace "+ns)
	f.fails(t, ns, []string{"clone", "s1", "--count", "0"}, "--count 0 is outside 1..100")
}

func TestCloneFromSandboxSnapshotsFirstAndWaits(t *testing.T) {
	f, ns := setup(t)
	rules := &sandlotv1.SandboxNetwork{AllowOut: []string{"example.com"}, DenyOut: []string{"0.0.0.0/0"}, Ingress: true}
	parent := f.sandbox(t, ns, "parent", func(s *sandlotv1.Sandbox) {
		s.Spec.Metadata, s.Spec.Network = map[string]string{"job": "42"}, rules
	})
	f.running(t, parent, "node-1", "10.0.0.2")

	cmd := f.start(ns, "clone", "sandbox/parent", "--count", "2", "--wait")
	snap := f.onlySnapshot(t, ns, "a snapshot of the parent exists")
	if snap.Spec.Source.Sandbox != "parent" {
		t.Errorf("snapshot source %+v", snap.Spec.Source)
	}
	cmd.pending(t, 200*time.Millisecond, "the snapshot is Ready")
	before := &sandlotv1.SandboxList{}
	f.list(t, ns, before)
	if len(before.Items) != 1 {
		t.Errorf("clones were created before their snapshot was Ready: %d sandboxes", len(before.Items))
	}
	setStatus(t, f, snap, func(s *sandlotv1.Snapshot) {
		s.Status.Phase, s.Status.NodeName, s.Status.RemoteStatus = sandlotv1.DataReady, "node-1", sandlotv1.RemoteNotApplicable
	})
	var clones []sandlotv1.Sandbox
	poll.Eventually(t, waitTimeout, "two clones exist", func() error {
		list := &sandlotv1.SandboxList{}
		f.list(t, ns, list)
		clones = clones[:0]
		for _, s := range list.Items {
			if s.Spec.Source.Snapshot == snap.Name {
				clones = append(clones, s)
			}
		}
		if len(clones) != 2 {
			return fmt.Errorf("%d clones", len(clones))
		}
		return nil
	})
	f.running(t, &clones[0], "node-1", "10.0.1.1")
	cmd.shows(t, "sandbox/"+clones[0].Name+": phase Running")
	cmd.pending(t, 200*time.Millisecond, "the second clone is usable")
	f.running(t, &clones[1], "node-1", "10.0.1.2")

	res := cmd.wait(t, 10*time.Second)
	if res.err != nil {
		t.Fatalf("clone --wait: %v\n%s", res.err, res.errOut)
	}
	contains(t, "stdout", res.out, "snapshot/"+snap.Name+" ready on node-1, remoteStatus NotApplicable (local store: restorable on node-1 only)",
		"sandbox/"+clones[0].Name+" ready", "sandbox/"+clones[1].Name+" ready")
	for _, c := range clones {
		if c.Spec.Metadata["job"] != "42" {
			t.Errorf("clone %s metadata %v, want the parent's", c.Name, c.Spec.Metadata)
		}
		if !equality.Semantic.DeepEqual(c.Spec.Network, rules) {
			t.Errorf("clone %s network %+v, want the parent's %+v", c.Name, c.Spec.Network, rules)
		}
	}
}
