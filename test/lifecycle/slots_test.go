package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestStartsIntoPoolPods: with a warm pool, every start lands in a pod
// that exists — the template's sandbox, each fork child and a resume run
// in the pool's pods (by UID), the children and the resume restored from
// their own data in place. Each child has the parent's state and its own
// ID, hostname, IP and random stream; the parent is intact; the resumed
// sandbox keeps what it wrote, under the same ID.
func TestStartsIntoPoolPods(t *testing.T) {
	k := sbxtest.Client(t, c)
	tpl := probedTemplate(t, k, "slots", interpreterProbe, sbxtest.DefaultImage(t))
	setPool(t, k, tpl, `{"spec":{"warmPool":2}}`)
	pool := waitPool(t, k, tpl, 2)
	parent := sbxtest.Create(t, k, "slots", "slot-parent")["slot-parent"]
	inPool(t, k, pool, parent)
	parent = sbxtest.WaitVMReady(t, k, parent.Name)
	sbxtest.EnvdRun(t, k, parent, sbxtest.WriteState)
	snap := sbxtest.Snapshot(t, k, "slot-fork", parent.Name)
	pool = waitPool(t, k, tpl, 2) // refilled
	// The local store: the children may restore on the snapshot's node
	// only, where two pool pods wait.
	seen := map[string]string{}
	var children []*sandlotv1.Sandbox
	for i := range 2 {
		ch := sbxtest.FromSnapshot(t, k, fmt.Sprintf("slot-child-%d", i), snap.Name)
		inPool(t, k, pool, ch)
		ch = sbxtest.WaitVMReady(t, k, ch.Name)
		if got := sbxtest.EnvdRun(t, k, ch, sbxtest.ReadState); got != sbxtest.WantState {
			t.Fatalf("%s has %q, its parent wrote %q", ch.Name, got, sbxtest.WantState)
		}
		out := strings.Fields(sbxtest.EnvdRun(t, k, ch, "echo $SANDLOT_SANDBOX_ID; hostname; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"))
		if len(out) != 3 || out[0] != ch.Status.SandboxID || out[1] != ch.Status.SandboxID {
			t.Fatalf("%s answers %q: not its own identity (ID %s)", ch.Name, out, ch.Status.SandboxID)
		}
		for _, v := range []string{out[0], out[2], ch.Status.PodIP} {
			if other, dup := seen[v]; dup {
				t.Fatalf("%s and %s share %q", ch.Name, other, v)
			}
			seen[v] = ch.Name
		}
		sbxtest.EnvdRun(t, k, ch, fmt.Sprintf("echo %d > /root/mine", i))
		children = append(children, ch)
	}
	if got := sbxtest.EnvdRun(t, k, parent, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("the parent has %q after the fork", got)
	}
	pool = waitPool(t, k, tpl, 2)
	resumeIntoPool(t, k, pool, children[0], "0\n")
}

// resumeIntoPool pauses sbx, resumes it and checks it ran again in one of
// the pool's pods with what it wrote to /root/mine.
func resumeIntoPool(t *testing.T, k client.Client, pool map[types.UID]bool, sbx *sandlotv1.Sandbox, mine string) {
	t.Helper()
	sbxtest.Pause(t, k, sbx.Name)
	sbxtest.SetPaused(t, k, sbx.Name, false)
	var s sandlotv1.Sandbox
	poll.Eventually(t, 2*time.Minute, sbx.Name+" resumed", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &s); err != nil {
			return err
		}
		if !s.Usable(s.Generation) {
			return fmt.Errorf("phase %s, conditions %+v", s.Status.Phase, s.Status.Conditions)
		}
		return nil
	})
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
	pod := &corev1.Pod{}
	if err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: s.Status.PodName}, pod); err != nil {
		t.Fatal(err)
	}
	if !pool[pod.UID] {
		t.Fatalf("%s runs in pod %s (%s), not one of the pool's %v: a pod was started", s.Name, pod.Name, pod.UID, pool)
	}
}
