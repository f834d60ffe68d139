package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// probedTemplate makes a template of image with a readiness probe.
func probedTemplate(t *testing.T, k client.Client, name string, probe *sandlotv1.ReadinessProbe, image string) *sandlotv1.Template {
	t.Helper()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: sandlotv1.TemplateSpec{Image: image, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}, ReadinessProbe: probe}}
	if err := k.Create(context.Background(), tpl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), tpl) })
	return tpl
}

var interpreterProbe = &sandlotv1.ReadinessProbe{HTTPGet: &sandlotv1.HTTPGetProbe{Port: sandlotv1.CodeInterpreterPort, Path: "/health"},
	TimeoutSeconds: 120}

// waitBase waits for the template's BaseSnapshotReady condition to have
// status and, when given, reason.
func waitBase(t *testing.T, k client.Client, tpl *sandlotv1.Template, status metav1.ConditionStatus, reason string, timeout time.Duration) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	poll.Eventually(t, timeout, tpl.Name+" BaseSnapshotReady "+string(status)+" "+reason, func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(tpl), tpl); err != nil {
			return err
		}
		cond = meta.FindStatusCondition(tpl.Status.Conditions, sandlotv1.ConditionBaseSnapshotReady)
		if cond == nil || cond.Status != status || (reason != "" && cond.Reason != reason) || cond.ObservedGeneration != tpl.Generation {
			return fmt.Errorf("condition %+v", cond)
		}
		return nil
	})
	return cond
}

// TestTemplateRestores: a Template builds its base snapshot on each node
// (a cold boot until the probe passes, then a snapshot); ten sandboxes
// from it all restore that base — the boot ID of their node's base, each
// with its own hostname, IP and random stream.
func TestTemplateRestores(t *testing.T) {
	k := sbxtest.Client(t, c)
	tpl := probedTemplate(t, k, "lc", interpreterProbe, sbxtest.DefaultImage(t))
	cond := waitBase(t, k, tpl, metav1.ConditionTrue, "", 5*time.Minute)
	t.Logf("%s: %s", tpl.Name, cond.Message)
	// Its base on both nodes first: ten restores placed on the one node
	// ready while the other still cold-boots its base (TCG, two cores)
	// outlast the kubelet's runtime request timeout.
	if err := sbxtest.WaitBases(context.Background(), k, client.ObjectKeyFromObject(tpl), 2, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("lc-%d", i)
	}
	sbxs := sbxtest.Create(t, k, "lc", names...)
	bootByNode := map[string]string{}
	seen := map[string]string{}
	for _, name := range names {
		s := sbxs[name]
		pod := &corev1.Pod{}
		if err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: s.Status.PodName}, pod); err != nil {
			t.Fatal(err)
		}
		// Its own pod's or a start slot's: the pod restores the base, or its claim does.
		if src := sandlotv1.PodSource(pod.Annotations); src == nil || s.Status.BaseSnapshot == "" || src.Name != s.Status.BaseSnapshot {
			t.Fatalf("%s did not restore its template's base: base %q, the pod restores %+v", name, s.Status.BaseSnapshot, src)
		}
		out := strings.Fields(sbxtest.EnvdRun(t, k, s, "cat /proc/sys/kernel/random/boot_id; hostname; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"))
		if len(out) != 3 {
			t.Fatalf("%s answered %q", name, out)
		}
		boot, host, random := out[0], out[1], out[2]
		if b, ok := bootByNode[s.Status.NodeName]; ok && b != boot {
			t.Fatalf("%s on %s booted as %s, its node's base as %s: not a restore of that base", name, s.Status.NodeName, boot, b)
		}
		bootByNode[s.Status.NodeName] = boot
		for _, v := range []string{host, random, s.Status.PodIP} {
			if other, dup := seen[v]; dup {
				t.Fatalf("%s and %s share %q: identity not renewed after restore", name, other, v)
			}
			seen[v] = name
		}
	}
	t.Logf("10 sandboxes restored, boot IDs by node %v", bootByNode)
}

// TestFork: a snapshot of a running sandbox (reporting how long the parent
// was paused) and five sandboxes from it: each sees the parent's file and
// in-memory value and keeps its own writes to itself.
func TestFork(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	parent := sbxtest.Create(t, k, "small", "parent")["parent"]
	sbxtest.EnvdRun(t, k, parent, sbxtest.WriteState)
	snap := sbxtest.Snapshot(t, k, "parent-fork", "parent")
	if snap.Status.SourcePausedMicroseconds <= 0 {
		t.Fatalf("the parent's pause is not reported: %+v", snap.Status.DataStatus)
	}
	t.Logf("fork: the parent was paused %v", time.Duration(snap.Status.SourcePausedMicroseconds)*time.Microsecond)
	children := make([]*sandlotv1.Sandbox, 5)
	for i := range children {
		children[i] = sbxtest.FromSnapshot(t, k, fmt.Sprintf("child-%d", i), snap.Name)
		if got := sbxtest.EnvdRun(t, k, children[i], sbxtest.ReadState); got != sbxtest.WantState {
			t.Fatalf("child %d has %q", i, got)
		}
		sbxtest.EnvdRun(t, k, children[i], fmt.Sprintf("echo %d > /root/mine; echo %d > /dev/shm/mine", i, i))
	}
	for i, ch := range children {
		want := fmt.Sprintf("%d\n%d\n", i, i)
		if got := sbxtest.EnvdRun(t, k, ch, "cat /root/mine /dev/shm/mine"); got != want {
			t.Fatalf("child %d sees %q, wrote %q", i, got, want)
		}
	}
	if got := sbxtest.EnvdRun(t, k, parent, "cat /root/mine /dev/shm/mine 2>/dev/null; echo end"); got != "end\n" {
		t.Fatalf("the parent sees its children's writes: %q", got)
	}
}

// TestRollback: a rollback restores the sandbox in place from its own
// snapshot — a deleted file and an in-memory value come back, same ID
// and pod — and a snapshot of another sandbox is refused.
func TestRollback(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbxs := sbxtest.Create(t, k, "small", "undoer", "stranger")
	sbx := sbxs["undoer"]
	sbxtest.EnvdRun(t, k, sbx, sbxtest.WriteState)
	snap := sbxtest.Snapshot(t, k, "undoer-1", "undoer")
	sbxtest.EnvdRun(t, k, sbx, "rm /root/file; echo changed > /dev/shm/value")
	rollback(t, k, "undoer", "undoer-1", "r1")
	s := waitRolledBack(t, k, "undoer", func(s *sandlotv1.Sandbox, c *metav1.Condition) error {
		if s.Status.LastRollbackRequestID != "r1" || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("last request %q, condition %+v", s.Status.LastRollbackRequestID, c)
		}
		return nil
	})
	if s.Status.SandboxID != sbx.Status.SandboxID || s.Status.PodName != sbx.Status.PodName || s.Status.NodeName != sbx.Status.NodeName {
		t.Fatalf("after the rollback %s/%s/%s, before %s/%s/%s", s.Status.SandboxID, s.Status.PodName, s.Status.NodeName,
			sbx.Status.SandboxID, sbx.Status.PodName, sbx.Status.NodeName)
	}
	poll.Eventually(t, 30*time.Second, "state back", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A file not back yet fails cat (tried again); envd failing ends the wait.
		got, err := sbxtest.Exec(ctx, k, s, sbxtest.ReadState)
		var notYet *sbxtest.ExitError
		if err != nil && !errors.As(err, &notYet) {
			return poll.Stop(err)
		}
		if err != nil {
			return err
		}
		if got != sbxtest.WantState {
			return fmt.Errorf("sandbox has %q", got)
		}
		return nil
	})
	t.Logf("rollback: %s", meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionRolledBack).Message)
	rollback(t, k, "stranger", snap.Name, "r2")
	waitRolledBack(t, k, "stranger", func(s *sandlotv1.Sandbox, c *metav1.Condition) error {
		if c.Status != metav1.ConditionFalse || c.Reason != sandlotv1.ReasonRollbackRefused || s.Status.LastRollbackRequestID != "" {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
}

func rollback(t *testing.T, k client.Client, name, snapshot, id string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"rollback":{"snapshot":%q,"requestID":%q}}}`, snapshot, id)
	s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if err := k.Patch(context.Background(), s, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

func waitRolledBack(t *testing.T, k client.Client, name string, check func(*sandlotv1.Sandbox, *metav1.Condition) error) *sandlotv1.Sandbox {
	t.Helper()
	s := &sandlotv1.Sandbox{}
	poll.Eventually(t, time.Minute, name+" RolledBack", func() error {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, s); err != nil {
			return err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionRolledBack)
		if c == nil {
			return fmt.Errorf("no RolledBack condition")
		}
		return check(s, c)
	})
	return s
}

// TestTimeouts: past its timeout a sandbox is deleted; one that asked to
// be paused on timeout is paused instead, and resumes intact.
func TestTimeouts(t *testing.T) {
	k := sbxtest.Client(t, c)
	ctx := context.Background()
	sbxtest.Template(t, k, "small")
	sbxtest.Create(t, k, "small", "warmup") // the template's base is built before the clocks start
	short := func(name string, action sandlotv1.TimeoutAction) *sandlotv1.Sandbox {
		s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "small"}, TimeoutSeconds: ptr.To[int32](25), OnTimeout: action}}
		if err := k.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sbxtest.Delete(t, k, name) })
		return s
	}
	short("ephemeral", "")
	short("napper", sandlotv1.TimeoutPause)
	sleeper := sbxtest.WaitRunning(t, k, "napper")
	sbxtest.EnvdRun(t, k, sleeper, sbxtest.WriteState)
	poll.Eventually(t, 90*time.Second, "ephemeral deleted, napper paused", func() error {
		err := k.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ephemeral"}, &sandlotv1.Sandbox{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("ephemeral still there (%v)", err)
		}
		var s sandlotv1.Sandbox
		if err := k.Get(ctx, client.ObjectKey{Namespace: "default", Name: "napper"}, &s); err != nil {
			return err
		}
		if s.Status.Phase != sandlotv1.SandboxPaused {
			return fmt.Errorf("napper %s (%s)", s.Status.Phase, s.Status.Message)
		}
		return nil
	})
	// Resumed with a longer timeout (as E2B's connect does): its 25 s count
	// again from the resume, and a resume slowed by a loaded machine
	// would expire before the test reads it.
	resume := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":false,"timeoutSeconds":600}}`))
	if err := k.Patch(ctx, &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "napper", Namespace: "default"}}, resume); err != nil {
		t.Fatal(err)
	}
	resumed := sbxtest.WaitRunning(t, k, "napper")
	if got := sbxtest.EnvdRun(t, k, resumed, sbxtest.ReadState); got != sbxtest.WantState || resumed.Status.SandboxID != sleeper.Status.SandboxID {
		t.Fatalf("resumed %s with %q", resumed.Status.SandboxID, got)
	}
}

// TestTemplateFailures: a template whose image no node has, and one whose
// probe never passes, end with a condition saying so.
func TestTemplateFailures(t *testing.T) {
	k := sbxtest.Client(t, c)
	missing := probedTemplate(t, k, "missing", interpreterProbe, "docker.io/library/not-imported:1")
	never := probedTemplate(t, k, "never", &sandlotv1.ReadinessProbe{TCPSocket: &sandlotv1.TCPSocketProbe{Port: 1}, TimeoutSeconds: 15},
		sbxtest.DefaultImage(t))
	cond := waitBase(t, k, missing, metav1.ConditionFalse, sandlotv1.ReasonImageMissing, 2*time.Minute)
	t.Logf("missing: %s", cond.Message)
	cond = waitBase(t, k, never, metav1.ConditionFalse, sandlotv1.ReasonProbeTimeout, 3*time.Minute)
	t.Logf("never: %s", cond.Message)
}

// TestWarmPool: a template's warm pool (three paused, restored VMs per
// node) serves new sandboxes without a pod start — their pods are the
// pool's, by UID — with the sandbox's own identity pushed in; the pool
// refills, a template change rolls it to the new base, and it scales to
// zero and back.
func TestWarmPool(t *testing.T) {
	k := sbxtest.Client(t, c)
	ctx := context.Background()
	tpl := probedTemplate(t, k, "pooled", interpreterProbe, sbxtest.DefaultImage(t))
	setPool(t, k, tpl, `{"spec":{"warmPool":3}}`)
	pool := waitPool(t, k, tpl, 3)
	sbxs := sbxtest.Create(t, k, "pooled", "warm-a", "warm-b", "warm-c")
	for name, s := range sbxs {
		pod := &corev1.Pod{}
		if err := k.Get(ctx, types.NamespacedName{Namespace: "default", Name: s.Status.PodName}, pod); err != nil {
			t.Fatal(err)
		}
		if !pool[pod.UID] {
			t.Fatalf("%s runs in pod %s (%s), not one of the pool's %v: a pod was started", name, pod.Name, pod.UID, pool)
		}
		waitVMReady(t, k, name)
		out := strings.Fields(sbxtest.EnvdRun(t, k, s, "hostname; echo $SANDLOT_SANDBOX_ID"))
		if len(out) != 2 || out[0] != s.Status.SandboxID || out[1] != s.Status.SandboxID {
			t.Fatalf("%s answers %q: the claim did not push its identity (ID %s)", name, out, s.Status.SandboxID)
		}
	}
	waitPool(t, k, tpl, 3) // refilled
	setPool(t, k, tpl, `{"spec":{"warmPool":1,"env":[{"name":"POOL_REVISION","value":"2"}]}}`)
	rolled := waitPool(t, k, tpl, 1)
	for uid := range rolled {
		if pool[uid] {
			t.Fatalf("pool pod %s survived the template change", uid)
		}
	}
	setPool(t, k, tpl, `{"spec":{"warmPool":0}}`)
	waitPool(t, k, tpl, 0)
	setPool(t, k, tpl, `{"spec":{"warmPool":1}}`) // and back
	waitPool(t, k, tpl, 1)
}

func setPool(t *testing.T, k client.Client, tpl *sandlotv1.Template, patch string) {
	t.Helper()
	if err := k.Patch(context.Background(), tpl, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// waitPool waits until every node's pool of the template's current base
// has want running pods and nothing else, and returns their UIDs.
func waitPool(t *testing.T, k client.Client, tpl *sandlotv1.Template, want int) map[types.UID]bool {
	t.Helper()
	return waitPoolPods(t, k, tpl, want, false)
}

// waitSlots is waitPool of the template's start slots.
func waitSlots(t *testing.T, k client.Client, tpl *sandlotv1.Template, want int) map[types.UID]bool {
	t.Helper()
	return waitPoolPods(t, k, tpl, want, true)
}

// waitPoolPods waits until every node has want unclaimed pool pods of the
// template's current base that run, warm ones or start slots (slots).
func waitPoolPods(t *testing.T, k client.Client, tpl *sandlotv1.Template, want int, slots bool) map[types.UID]bool {
	t.Helper()
	uids := map[types.UID]bool{}
	what := map[bool]string{false: "warm pool", true: "start slots"}[slots]
	poll.Eventually(t, 4*time.Minute, fmt.Sprintf("%s of %d per node", what, want), func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(tpl), tpl); err != nil {
			return err
		}
		pods := &corev1.PodList{}
		if err := k.List(context.Background(), pods, client.InNamespace("default"),
			client.MatchingLabels{sandlotv1.LabelPool: tpl.Name, sandlotv1.LabelSandbox: ""}); err != nil {
			return err
		}
		clear(uids)
		perNode := map[string]int{}
		for _, p := range pods.Items {
			if sandlotv1.IsStartSlot(p.Annotations) != slots {
				continue
			}
			if p.Labels[sandlotv1.LabelBaseRevision] != tpl.Status.BaseRevision || p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pool pod %s: revision %s (current %s), %s", p.Name, p.Labels[sandlotv1.LabelBaseRevision],
					tpl.Status.BaseRevision, p.Status.Phase)
			}
			perNode[p.Spec.NodeName]++
			uids[p.UID] = true
		}
		for _, n := range c.Nodes {
			if perNode[n.Name] != want {
				return fmt.Errorf("%s per node %v, status %+v", what, perNode, tpl.Status.Pool)
			}
		}
		return nil
	})
	return uids
}

func waitVMReady(t *testing.T, k client.Client, name string) {
	t.Helper()
	poll.Eventually(t, time.Minute, name+" VMReady", func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionVMReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("VMReady %+v", c)
		}
		return nil
	})
}
