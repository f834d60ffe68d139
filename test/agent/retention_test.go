package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestPausedExpiryGoesWithItsData: a pause package whose expiry passes
// (here set by a user on the package after the pause) is deleted with its
// data — the objects in MinIO and the node's copy — and its Sandbox ends
// Failed, PausedStateDiscarded; `kubectl describe` tells that story.
func TestPausedExpiryGoesWithItsData(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbx := sbxtest.Create(t, k, "small", "expiring")["expiring"]
	ps := sbxtest.Pause(t, k, sbx.Name)
	sbxtest.WaitData(t, k, ps, 2*time.Minute, "remote Ready", sbxtest.RemoteReady)
	key := "paused/" + string(ps.UID)
	local := filepath.Join(nodeNamed(ps.Status.NodeName).StoreDir(), key)
	if files := objects(t, key); len(files) == 0 {
		t.Fatalf("MinIO holds nothing of the Ready package %s", key)
	}
	if _, err := os.Stat(local); err != nil {
		t.Fatalf("the node's copy of the package: %v", err)
	}

	if err := k.Patch(context.Background(), ps, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"expireAfterSeconds":1}}`))); err != nil {
		t.Fatalf("set the package's expiry: %v", err)
	}
	waitGone(t, k, ps)
	poll.Eventually(t, time.Minute, "the package's data gone from MinIO and the node", func() error {
		if files := objects(t, key); len(files) > 0 {
			return fmt.Errorf("MinIO still holds %v", files)
		}
		if _, err := os.Stat(local); !os.IsNotExist(err) {
			return fmt.Errorf("the node still has %s (%v)", local, err)
		}
		return nil
	})
	poll.Eventually(t, time.Minute, sbx.Name+" Failed, PausedStateDiscarded", func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &s); err != nil {
			return err
		}
		if s.Status.Phase != sandlotv1.SandboxFailed || s.Status.Reason != sandlotv1.ReasonPausedStateDiscarded {
			return fmt.Errorf("phase %s, reason %s", s.Status.Phase, s.Status.Reason)
		}
		return nil
	})
	describe(t, "sbx", sbx.Name, "Paused", sandlotv1.ReasonPausedStateDiscarded)
}

// describe checks `kubectl describe` of an object lists Events with each
// of reasons.
func describe(t *testing.T, kind, name string, reasons ...string) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, "kubectl describe "+kind+" "+name+" shows "+strings.Join(reasons, ", "), func() error {
		out, err := c.Kubectl(context.Background(), "describe", kind, name)
		if err != nil {
			return err
		}
		_, events, _ := strings.Cut(out, "Events:")
		for _, r := range reasons {
			if !strings.Contains(events, r) {
				return fmt.Errorf("no %s among the Events:%s", r, events)
			}
		}
		return nil
	})
}

// TestCacheCapKeepsWhatSandboxesNeed: with a node's s3 cache capped at one
// byte, what nothing uses is evicted once it is in MinIO, but what a
// sandbox running on that node was restored from (and what that builds
// on) stays, long after the restore: a snapshot of that sandbox is taken
// and restored on the node, and evicted data comes back on demand.
func TestCacheCapKeepsWhatSandboxesNeed(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	src := sbxtest.Create(t, k, "small", "cap-src")["cap-src"]
	a, b := src.Status.NodeName, sbxtest.OtherNode(c, src.Status.NodeName)
	sbxtest.EnvdRun(t, k, src, sbxtest.WriteState)
	used := sbxtest.Snapshot(t, k, "cap-used", src.Name)
	spare := sbxtest.Snapshot(t, k, "cap-spare", src.Name)
	for _, s := range []*sandlotv1.Snapshot{used, spare} {
		sbxtest.WaitData(t, k, s, 3*time.Minute, "remote Ready", sbxtest.RemoteReady)
	}
	// The chart's agents on both nodes get the cap (a DaemonSet's flags
	// are the same everywhere); what is checked is b's cache.
	upgradeAgents(t, "--s3-cache-max-bytes=1")
	t.Cleanup(func() { upgradeAgents(t) })
	sbxtest.Cordon(t, k, a, true)
	t.Cleanup(func() { sbxtest.Cordon(t, k, a, false) })

	user := sbxtest.FromSnapshot(t, k, "cap-user", used.Name)
	tmp := sbxtest.FromSnapshot(t, k, "cap-tmp", spare.Name)
	if user.Status.NodeName != b || tmp.Status.NodeName != b {
		t.Fatalf("restored on %s and %s, want both on %s", user.Status.NodeName, tmp.Status.NodeName, b)
	}
	sbxtest.Delete(t, k, tmp.Name) // nothing uses cap-spare's copy now
	// A snapshot on b: committed, uploaded, then counted — over the cap.
	later := sbxtest.Snapshot(t, k, "cap-later", user.Name)
	sbxtest.WaitData(t, k, later, 3*time.Minute, "remote Ready", sbxtest.RemoteReady)

	cache := nodeNamed(b).StoreDir()
	spareKey, usedKey := "snapshots/"+string(spare.UID), "snapshots/"+string(used.UID)
	poll.Eventually(t, time.Minute, b+" evicts the copy nothing uses ("+spareKey+")", func() error {
		if _, err := os.Stat(filepath.Join(cache, spareKey)); !os.IsNotExist(err) {
			return fmt.Errorf("still cached (%v)", err)
		}
		return nil
	})
	kept := append([]string{usedKey, "disks/" + used.Status.BaseDiskSHA256}, dependsOnKey(t, k, used)...)
	for _, key := range kept {
		if _, err := os.Stat(filepath.Join(cache, key)); err != nil {
			t.Errorf("%s evicted %s, which cap-user was restored from or builds on: %v", b, key, err)
		}
	}
	again := sbxtest.FromSnapshot(t, k, "cap-again", later.Name)
	if got := sbxtest.EnvdRun(t, k, again, sbxtest.ReadState); got != sbxtest.WantState || again.Status.NodeName != b {
		t.Fatalf("restored from cap-later on %s reads %q", again.Status.NodeName, got)
	}
	back := sbxtest.FromSnapshot(t, k, "cap-back", spare.Name) // downloaded again
	if got := sbxtest.EnvdRun(t, k, back, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("restored from the evicted cap-spare reads %q", got)
	}
}

// dependsOnKey is the store key of the data snap builds on, if any.
func dependsOnKey(t *testing.T, k client.Client, snap *sandlotv1.Snapshot) []string {
	t.Helper()
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(snap), snap); err != nil {
		t.Fatal(err)
	}
	d := snap.Status.DependsOn
	if d == nil || d.UID == "" {
		return nil
	}
	prefix := map[string]string{"Snapshot": "snapshots/", "PausedSandbox": "paused/"}[d.Kind]
	return []string{prefix + d.UID}
}

// upgradeAgents upgrades the release with the suite's agent flags and
// extra ones after them (none: the suite's own), as an operator would.
func upgradeAgents(t *testing.T, extra ...string) {
	t.Helper()
	if err := c.Upgrade(agentValues(extra...)); err != nil {
		t.Fatalf("agents with %v: %v", extra, err)
	}
}
