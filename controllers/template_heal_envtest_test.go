package controllers_test

import (
	"context"
	"fmt"
	"testing"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestDeletedBaseIsBuiltAgain: a template's Ready base snapshot deleted by
// hand (as `kubectl delete snap --all` does) stops being offered at once
// and is built again by the template on its own; a sandbox created
// meanwhile waits, then starts from the new base. Before, the template
// kept naming the deleted snapshot Ready and its sandboxes stayed Pending
// until the template was re-created.
func TestDeletedBaseIsBuiltAgain(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("heal-node", "8", "16Gi", nil)
	h.acceptedTemplate("healing", 512)
	h.buildBases("healing")
	ready := h.baseEntry("healing", "heal-node", func(e sandlotv1.BaseSnapshot) error {
		if e.Phase != sandlotv1.BaseReady {
			return fmt.Errorf("entry %+v, want Ready", e)
		}
		return nil
	})
	old := &sandlotv1.Snapshot{}
	if err := h.c.Get(context.Background(), h.key(ready.Snapshot), old); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	h.gone(old.DeepCopy())
	h.baseEntry("healing", "heal-node", func(e sandlotv1.BaseSnapshot) error {
		if e.Phase != sandlotv1.BaseBuilding {
			return fmt.Errorf("entry %+v, want Building again", e)
		}
		return nil
	})
	h.create(newSandbox("after", sandlotv1.SandboxSource{Template: "healing"}))
	h.baseBuilder("healing")
	h.buildBases("healing")
	sbx := h.waitPhase("after", sandlotv1.SandboxStarting)
	fresh := &sandlotv1.Snapshot{}
	if err := h.c.Get(context.Background(), h.key(ready.Snapshot), fresh); err != nil {
		t.Fatal(err)
	}
	if sbx.Status.BaseSnapshot != ready.Snapshot || fresh.UID == old.UID {
		t.Fatalf("sandbox restores %q; base %s uid %s (the deleted one's %s): want the rebuilt base",
			sbx.Status.BaseSnapshot, fresh.Name, fresh.UID, old.UID)
	}
}
