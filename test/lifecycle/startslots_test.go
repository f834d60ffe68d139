package lifecycle

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestStartSlots: a template without a warm pool keeps two start slots
// per node — pods running no VM. Three sandboxes created at once run in
// slots (no pod started: the pods are the slots', by UID), the base
// restored into each with its own ID, hostname, IP and random stream; the
// slots refill; two sandboxes from a snapshot of one of them, created
// before it is Ready, restore it into slots of its node with its state.
func TestStartSlots(t *testing.T) {
	k := sbxtest.Client(t, c)
	tpl := probedTemplate(t, k, "slotted", interpreterProbe, sbxtest.DefaultImage(t))
	setPool(t, k, tpl, `{"spec":{"slots":2}}`)
	slots := waitSlots(t, k, tpl, 2)
	sbxs := sbxtest.Create(t, k, "slotted", "slotted-a", "slotted-b", "slotted-c")
	seen := map[string]string{}
	for name := range sbxs {
		inPool(t, k, slots, sbxs[name])
		distinct(t, k, sbxtest.WaitVMReady(t, k, name), seen)
	}
	sbxtest.EnvdRun(t, k, sbxs["slotted-a"], sbxtest.WriteState)
	refilled := waitSlots(t, k, tpl, 2)
	kept := 0
	for uid := range refilled {
		if slots[uid] {
			kept++
		}
	}
	if kept != 1 {
		t.Fatalf("%d of the first slots among the refilled %v: three of four were claimed, want one kept and three new", kept, refilled)
	}
	children := forkAtOnce(t, k, "slotted-a", "slotted-snap", 2)
	if inSlots := checkChildren(t, k, refilled, children, seen); inSlots != 2 {
		t.Fatalf("%d of 2 children restored into the snapshot's node's slots", inSlots)
	}
}

// distinct checks s answers with its own identity and that its ID, random
// stream and IP are no other sandbox's in seen.
func distinct(t *testing.T, k client.Client, s *sandlotv1.Sandbox, seen map[string]string) {
	t.Helper()
	out := strings.Fields(sbxtest.EnvdRun(t, k, s, "echo $SANDLOT_SANDBOX_ID; hostname; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"))
	if len(out) != 3 || out[0] != s.Status.SandboxID || out[1] != s.Status.SandboxID {
		t.Fatalf("%s answers %q: not its own identity (ID %s)", s.Name, out, s.Status.SandboxID)
	}
	for _, v := range []string{out[0], out[2], s.Status.PodIP} {
		if other, dup := seen[v]; dup {
			t.Fatalf("%s and %s share %q", s.Name, other, v)
		}
		seen[v] = s.Name
	}
}
