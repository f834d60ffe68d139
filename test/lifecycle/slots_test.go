package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestStartsIntoPoolPods: with a warm pool, starts land in pods that
// exist — the template's sandbox, fork children and a resume run in the
// pool's pods (by UID), the children and the resume restored from their
// own data in place. Twenty children are created the moment their
// snapshot is (before it is Ready): those beyond the pool get pods of
// their own, and every one has the parent's state and its own ID,
// hostname, IP and random stream; the parent is intact. A pause undone at
// once leaves the sandbox running with its state; a paused sandbox
// resumes into a pool pod with what it wrote, under the same ID.
func TestStartsIntoPoolPods(t *testing.T) {
	k := sbxtest.Client(t, c)
	// Twenty children on the snapshot's node (the local store): beside
	// the pool, the parent and the node's own pods, the RuntimeClass's
	// 100m of CPU per pod would admit only 18 on a 2-core node.
	withoutOverhead(t, k)
	tpl := probedTemplate(t, k, "slots", interpreterProbe, sbxtest.DefaultImage(t))
	// The warm pool's pods only: no start slots (TestStartSlots has them).
	setPool(t, k, tpl, `{"spec":{"warmPool":3,"slots":0}}`)
	pool := waitPool(t, k, tpl, 3)
	parent := sbxtest.Create(t, k, "slots", "slot-parent")["slot-parent"]
	inPool(t, k, pool, parent)
	parent = sbxtest.WaitVMReady(t, k, parent.Name)
	sbxtest.EnvdRun(t, k, parent, sbxtest.WriteState)
	pool = waitPool(t, k, tpl, 3) // refilled
	children := forkAtOnce(t, k, parent.Name, "slot-fork", 20)
	claimed := checkChildren(t, k, pool, children, map[string]string{})
	// The local store: only the snapshot's node may restore it, where
	// three pool pods waited (and refills follow the claims).
	if claimed < 3 {
		t.Fatalf("%d of 20 children restored into pool pods, want at least the 3 of the snapshot's node's pool", claimed)
	}
	t.Logf("fork 20: %d children restored into pool pods, %d into pods of their own", claimed, len(children)-claimed)
	if got := sbxtest.EnvdRun(t, k, parent, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("the parent has %q after the fork", got)
	}
	for i, ch := range children[:2] {
		sbxtest.EnvdRun(t, k, ch, fmt.Sprintf("echo %d > /root/mine", i))
	}
	pauseUndone(t, k, children[0], "0\n")
	for _, ch := range children[2:] { // room for the pool's refill
		sbxtest.Delete(t, k, ch.Name)
	}
	pool = waitPool(t, k, tpl, 3)
	resumeIntoPool(t, k, pool, children[1], "1\n")
}

// checkChildren checks each child has its parent's state and its own
// identity (none of seen's), and counts those that run in pool's pods.
func checkChildren(t *testing.T, k client.Client, pool map[types.UID]bool, children []*sandlotv1.Sandbox, seen map[string]string) int {
	t.Helper()
	inPool := 0
	for _, ch := range children {
		if isPoolPod(t, k, pool, ch) {
			inPool++
		}
		if got := sbxtest.EnvdRun(t, k, ch, sbxtest.ReadState); got != sbxtest.WantState {
			t.Fatalf("%s has %q, its parent wrote %q", ch.Name, got, sbxtest.WantState)
		}
		distinct(t, k, ch, seen)
	}
	return inPool
}

// forkAtOnce snapshots parent and creates n sandboxes from the snapshot
// right after it (not waiting for Ready), then waits until each is usable.
func forkAtOnce(t *testing.T, k client.Client, parent, snap string, n int) []*sandlotv1.Sandbox {
	t.Helper()
	ctx := context.Background()
	s := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: snap, Namespace: "default"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: parent}}}
	if err := k.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), s) })
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", snap, i)
		sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: "default"},
			Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Snapshot: snap}, TimeoutSeconds: ptr.To[int32](1800)}}
		if err := k.Create(ctx, sbx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sbxtest.Delete(t, k, sbx.Name) })
	}
	out := make([]*sandlotv1.Sandbox, n)
	for i, name := range names {
		out[i] = waitUsable(t, k, name, 1)
	}
	return out
}

// pauseUndone pauses sbx and unpauses it at once: it ends running, with
// what it wrote to /root/mine and its ID.
func pauseUndone(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox, mine string) {
	t.Helper()
	sbxtest.SetPaused(t, k, sbx.Name, true)
	sbxtest.SetPaused(t, k, sbx.Name, false)
	cur := &sandlotv1.Sandbox{}
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), cur); err != nil {
		t.Fatal(err)
	}
	s := waitUsable(t, k, sbx.Name, cur.Generation)
	if s.Status.SandboxID != sbx.Status.SandboxID {
		t.Fatalf("runs as %s after the pause undone, ran as %s", s.Status.SandboxID, sbx.Status.SandboxID)
	}
	if got := sbxtest.EnvdRun(t, k, s, "cat /root/mine"); got != mine {
		t.Fatalf("%s has %q in /root/mine after the pause undone, wrote %q", s.Name, got, mine)
	}
}

// waitUsable waits until the sandbox is usable at generation gen or later.
func waitUsable(t *testing.T, k client.Client, name string, gen int64) *sandlotv1.Sandbox {
	t.Helper()
	s := &sandlotv1.Sandbox{}
	poll.Eventually(t, 4*time.Minute, name+" usable", func() error {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, s); err != nil {
			return err
		}
		if s.Status.Phase.Terminal() {
			t.Fatalf("%s ended %s: %s: %s", name, s.Status.Phase, s.Status.Reason, s.Status.Message)
		}
		if !s.Usable(gen) {
			return fmt.Errorf("phase %s, conditions %+v", s.Status.Phase, s.Status.Conditions)
		}
		return nil
	})
	return s
}

// resumeIntoPool pauses sbx, resumes it and checks it ran again in one of
// the pool's pods with what it wrote to /root/mine.
func resumeIntoPool(t *testing.T, k client.Client, pool map[types.UID]bool, sbx *sandlotv1.Sandbox, mine string) {
	t.Helper()
	sbxtest.Pause(t, k, sbx.Name)
	sbxtest.SetPaused(t, k, sbx.Name, false)
	cur := &sandlotv1.Sandbox{}
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), cur); err != nil {
		t.Fatal(err)
	}
	s := *waitUsable(t, k, sbx.Name, cur.Generation)
	inPool(t, k, pool, &s)
	if s.Status.SandboxID != sbx.Status.SandboxID {
		t.Fatalf("resumed as %s, paused as %s", s.Status.SandboxID, sbx.Status.SandboxID)
	}
	if got := sbxtest.EnvdRun(t, k, &s, "cat /root/mine"); got != mine {
		t.Fatalf("%s resumed with %q in /root/mine, wrote %q", s.Name, got, mine)
	}
}

// inPool fails unless the sandbox's pod is one of the pool's (no pod was
// started for it).
func inPool(t *testing.T, k client.Client, pool map[types.UID]bool, s *sandlotv1.Sandbox) {
	t.Helper()
	if !isPoolPod(t, k, pool, s) {
		t.Fatalf("%s runs in pod %s, not one of the pool's %v: a pod was started", s.Name, s.Status.PodName, pool)
	}
}

func isPoolPod(t *testing.T, k client.Client, pool map[types.UID]bool, s *sandlotv1.Sandbox) bool {
	t.Helper()
	pod := &corev1.Pod{}
	if err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: s.Status.PodName}, pod); err != nil {
		t.Fatal(err)
	}
	return pool[pod.UID]
}

// withoutOverhead drops the CPU of the RuntimeClass's per-pod overhead
// until the test ends, when it is put back. Its memory stays: QEMU runs in
// the pod's cgroup.
func withoutOverhead(t *testing.T, k client.Client) {
	t.Helper()
	ctx := context.Background()
	rc := &nodev1.RuntimeClass{}
	if err := k.Get(ctx, client.ObjectKey{Name: sandlotv1.RuntimeClassName}, rc); err != nil {
		t.Fatal(err)
	}
	if rc.Overhead == nil {
		return
	}
	saved := rc.Overhead.DeepCopy()
	patch := client.MergeFrom(rc.DeepCopy())
	delete(rc.Overhead.PodFixed, corev1.ResourceCPU)
	if err := k.Patch(ctx, rc, patch); err != nil {
		t.Fatalf("drop the CPU of the RuntimeClass's overhead: %v", err)
	}
	t.Cleanup(func() {
		patch := client.MergeFrom(rc.DeepCopy())
		rc.Overhead = saved
		if err := k.Patch(context.Background(), rc, patch); err != nil {
			t.Errorf("put the RuntimeClass's overhead back: %v", err)
		}
	})
}
