package upgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	"github.com/sandlot-dev/sandlot/vm"
)

// before is what the previous release left, checked after the upgrade.
type before struct {
	version, runningPod string
	guests              map[string]string // node -> guest
	bases               map[string]string // node -> base snapshot
}

// TestUpgradeKeepsEverything: the previous release's state, helm
// upgrade to this checkout, and each piece checked in turn.
func TestUpgradeKeepsEverything(t *testing.T) {
	k := sbxtest.Client(t, c)
	// Made by the test itself: what it makes lives until its end (the
	// helpers delete it at t's cleanup).
	b := previousState(t, k)
	reasons := watchReasons(k)
	steps := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"helm upgrade to this checkout", func(t *testing.T) { upgrade(t, k, b) }},
		{"the running sandbox keeps its pod and files", func(t *testing.T) { stillRunning(t, k, b) }},
		{"the paused sandbox resumes", func(t *testing.T) { resumes(t, k) }},
		{"the snapshot restores", func(t *testing.T) { restores(t, k) }},
		{"bases rebuilt for the new guest, the pool rolled", func(t *testing.T) { rebuilt(t, k, b, reasons) }},
		{"a new sandbox runs the new guest; the old one keeps its own", func(t *testing.T) { newGuest(t, k, b) }},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.fn) {
			t.FailNow()
		}
	}
}

// previousState makes a template with a warm pool, a running sandbox
// with a file, a snapshot of it, and a paused sandbox with a file whose
// package is Ready in the shared store.
func previousState(t *testing.T, k client.Client) before {
	ch, err := loader.Load(glob(t, filepath.Join(c.Release, "sandlot-*.tgz")))
	if err != nil {
		t.Fatal(err)
	}
	b := before{version: ch.AppVersion(), guests: map[string]string{}, bases: map[string]string{}}
	sbxtest.Template(t, k, "up")
	sbxtest.Patch(t, k, &sandlotv1.Template{}, "up", `{"spec":{"warmPool":1}}`)
	sbxs := sbxtest.Create(t, k, "up", "running", "paused")
	sbxtest.EnvdRun(t, k, sbxs["running"], "echo kept > /root/state")
	sbxtest.EnvdRun(t, k, sbxs["paused"], "echo paused-kept > /root/state")
	b.runningPod = string(sbxtest.PodOf(t, k, sbxs["running"]).UID)
	sbxtest.Snapshot(t, k, "before", "running")
	ps := sbxtest.Pause(t, k, "paused")
	if seq := sbxtest.RemoteSequence(t, k, ps, 3*time.Minute); seq[len(seq)-1] != sandlotv1.RemoteReady {
		t.Fatalf("pause package remote status %v", seq)
	}
	if got := guestVersion(t, k, sbxs["running"]); got != b.version {
		t.Fatalf("the running sandbox's guest agent reports %q, want the previous release %s", got, b.version)
	}
	tpl := template(t, k)
	for _, e := range tpl.Status.BaseSnapshots {
		b.bases[e.Node] = e.Snapshot
	}
	for _, n := range c.Nodes {
		b.guests[n.Name] = nodeGuest(t, k, n.Name)
	}
	t.Logf("previous release %s: guests %v, bases %v", b.version, b.guests, b.bases)
	return b
}

// watchReasons records every base entry reason the template's status
// shows from now on, until stop (a rebuild can be over before the steps
// before rebuilt look).
func watchReasons(k client.Client) (stop func() map[string]bool) {
	seen, done, out := map[string]bool{}, make(chan struct{}), make(chan map[string]bool)
	go func() {
		for {
			tpl := &sandlotv1.Template{}
			if err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "up"}, tpl); err == nil {
				for _, e := range tpl.Status.BaseSnapshots {
					seen[e.Reason] = true
				}
			}
			select {
			case <-done:
				out <- seen
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() map[string]bool { close(done); return <-out }
}

func upgrade(t *testing.T, k client.Client, b before) {
	start := time.Now()
	if err := c.UpgradeToCheckout(); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm upgrade %s -> %s: %v", b.version, checkoutVersion(t), time.Since(start).Round(time.Millisecond))
	for _, name := range []string{"sandlot-controller", "sandlot-api", "sandlot-agent"} {
		pods := &corev1.PodList{}
		if err := k.List(context.Background(), pods, client.InNamespace(cluster.ReleaseNamespace),
			client.MatchingLabels{"app.kubernetes.io/name": name}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if img := p.Spec.Containers[0].Image; p.DeletionTimestamp == nil && !strings.HasSuffix(img, ":"+checkoutVersion(t)) {
				t.Errorf("%s pod %s runs %s after the upgrade", name, p.Name, img)
			}
		}
	}
}

func stillRunning(t *testing.T, k client.Client, b before) {
	sbx := sbxtest.WaitRunning(t, k, "running")
	if uid := string(sbxtest.PodOf(t, k, sbx).UID); uid != b.runningPod {
		t.Fatalf("the running sandbox's pod is %s after the upgrade, was %s", uid, b.runningPod)
	}
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, sbx, "cat /root/state")); got != "kept" {
		t.Fatalf("running sandbox reads %q", got)
	}
}

func resumes(t *testing.T, k client.Client) {
	sbxtest.SetPaused(t, k, "paused", false)
	sbx := sbxtest.WaitRunning(t, k, "paused")
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, sbx, "cat /root/state")); got != "paused-kept" {
		t.Fatalf("resumed sandbox reads %q", got)
	}
}

func restores(t *testing.T, k client.Client) {
	sbx := sbxtest.FromSnapshot(t, k, "from-before", "before")
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, sbx, "cat /root/state")); got != "kept" {
		t.Fatalf("sandbox restored from the old snapshot reads %q", got)
	}
}

// rebuilt: each node's agent publishes the new guest; the template says
// GuestChanged while a base of it builds, then names only that base,
// Ready; the old bases go (their deletion waits for the sandboxes
// restored from them) and the warm pool's pods are of the new guest.
func rebuilt(t *testing.T, k client.Client, b before, reasons func() map[string]bool) {
	guests := map[string]string{}
	for _, n := range c.Nodes {
		guests[n.Name] = nodeGuest(t, k, n.Name)
		if guests[n.Name] == b.guests[n.Name] {
			t.Fatalf("node %s still publishes guest %s after the upgrade", n.Name, guests[n.Name])
		}
	}
	poll.Eventually(t, 10*time.Minute, "each node's only base of the new guest, Ready", func() error {
		tpl := template(t, k)
		current := 0
		for _, e := range tpl.Status.BaseSnapshots {
			if e.Guest != guests[e.Node] || e.Phase != sandlotv1.BaseReady {
				return fmt.Errorf("entry %s/%s guest %s: %s %s", e.Node, e.Snapshot, e.Guest, e.Phase, e.Message)
			}
			current++
		}
		if current != len(c.Nodes) {
			return fmt.Errorf("%d Ready entries of the new guest", current)
		}
		return nil
	})
	if seen := reasons(); !seen[sandlotv1.ReasonGuestChanged] {
		t.Errorf("the template's status never said %s while the new bases built (reasons seen: %v)", sandlotv1.ReasonGuestChanged, seen)
	}
	for node, name := range b.bases {
		snap := &sandlotv1.Snapshot{}
		err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, snap)
		if client.IgnoreNotFound(err) != nil || (err == nil && snap.DeletionTimestamp == nil) {
			t.Errorf("old base %s on %s: %v, not being deleted", name, node, err)
		}
	}
	poll.Eventually(t, 5*time.Minute, "the warm pool of the new guest", func() error {
		pods := &corev1.PodList{}
		if err := k.List(context.Background(), pods, client.InNamespace("default"),
			client.MatchingLabels{sandlotv1.LabelPool: "up", sandlotv1.LabelSandbox: ""}); err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if g := p.Labels[sandlotv1.LabelBaseGuest]; g != guests[p.Spec.NodeName] {
				return fmt.Errorf("pool pod %s of guest %q on %s", p.Name, g, p.Spec.NodeName)
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running == 0 {
			return fmt.Errorf("no pool pod running of %d", len(pods.Items))
		}
		return nil
	})
}

func newGuest(t *testing.T, k client.Client, b before) {
	sbx := sbxtest.Create(t, k, "up", "after")["after"]
	if got, want := guestVersion(t, k, sbx), checkoutVersion(t); got != want {
		t.Errorf("a sandbox created after the upgrade runs guest agent %q, want %s", got, want)
	}
	poll.Eventually(t, time.Minute, "after's status names its guest agent", func() error {
		if got := sbxtest.WaitRunning(t, k, "after").Status.GuestVersion; got != checkoutVersion(t) {
			return fmt.Errorf("status.guestVersion %q", got)
		}
		return nil
	})
	old := sbxtest.WaitRunning(t, k, "running")
	if got := guestVersion(t, k, old); got != b.version {
		t.Errorf("the sandbox from before the upgrade runs guest agent %q, want its own %s", got, b.version)
	}
	// 0.1.0 ran the host's QEMU; this checkout installs the image's: the
	// new sandbox runs it, the old one keeps the QEMU it started with.
	if exe := qemuExe(t, string(sbxtest.PodOf(t, k, sbx).UID)); !isBundle(exe) {
		t.Errorf("a sandbox created after the upgrade runs QEMU %s, want the image's bundle", exe)
	}
	if exe := qemuExe(t, b.runningPod); isBundle(exe) {
		t.Errorf("the sandbox from before the upgrade runs QEMU %s, want the host's it started with", exe)
	}
}

// qemuExe is the binary the QEMU of the pod with that UID runs.
func qemuExe(t *testing.T, podUID string) string {
	t.Helper()
	pid, _, ok := sbxtest.FindQEMU(podUID)
	if !ok {
		t.Fatalf("no QEMU for pod %s", podUID)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func isBundle(exe string) bool { _, ok := vm.BundleRoot(exe); return ok }

// guestVersion asks the sandbox's guest agent (its PID 1) for its version.
func guestVersion(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox) string {
	t.Helper()
	fields := strings.Fields(sbxtest.EnvdRun(t, k, sbx, "/proc/1/exe --version"))
	if len(fields) < 2 || fields[0] != "sandlot-guest" {
		t.Fatalf("guest agent of %s: %q", sbx.Name, fields)
	}
	return fields[1]
}

func checkoutVersion(t *testing.T) string {
	t.Helper()
	ch, err := cluster.LoadChart()
	if err != nil {
		t.Fatal(err)
	}
	return ch.AppVersion()
}

func nodeGuest(t *testing.T, k client.Client, node string) string {
	t.Helper()
	n := &corev1.Node{}
	if err := k.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	return n.Annotations[sandlotv1.AnnotationGuest]
}

func template(t *testing.T, k client.Client) *sandlotv1.Template {
	t.Helper()
	tpl := &sandlotv1.Template{}
	if err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "up"}, tpl); err != nil {
		t.Fatal(err)
	}
	return tpl
}

func glob(t *testing.T, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) != 1 {
		t.Fatalf("%s: %v, %v", pattern, m, err)
	}
	return m[0]
}
