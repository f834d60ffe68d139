package drain

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// moving are the sandboxes the drain moves (paused: it has no pod).
var moving = []string{"busy", "claimed", "plain-1", "plain-2", "mounted"}

// TestDrainMovesSandboxes drains the node the sandboxes run on, then
// tries to drain the other one with nowhere to go.
func TestDrainMovesSandboxes(t *testing.T) {
	k := sbxtest.Client(t, c)
	from, to := c.Nodes[0].Name, c.Nodes[1].Name
	pids := state(t, k, from, to)
	before := map[string]string{}
	for _, name := range append(slices.Clone(moving), "paused") {
		before[name] = get(t, k, name).Status.SandboxID
	}
	stream := holdStream(t, before["busy"]) // an E2B client following a command of busy
	watch := watchDowntime(k)
	start := time.Now()
	out, err := c.Kubectl(context.Background(), "drain", from, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=8m")
	if err != nil {
		t.Fatalf("kubectl drain %s: %v", from, err)
	}
	t.Logf("kubectl drain %s: done in %v (its sandbox pods gone)\n%s", from, time.Since(start).Round(time.Millisecond), tail(out))
	// Whether an eviction met the budget here depends on timing (the pods
	// may already be going when kubectl asks): that the budget refuses
	// evictions is asserted in held; that no eviction killed a VM before
	// its move, by each sandbox running on with its files and process.
	for _, name := range moving {
		sbxtest.WaitRunning(t, k, name)
	}
	t.Logf("every sandbox running again %v after the drain began", time.Since(start).Round(time.Millisecond))
	report(t, watch())
	stream.reconnected(t)
	for _, name := range moving {
		sbx := sbxtest.WaitRunning(t, k, name)
		if sbx.Status.NodeName != to || sbx.Status.SandboxID != before[name] {
			t.Errorf("%s runs as %s on %s, want %s on %s", name, sbx.Status.SandboxID, sbx.Status.NodeName, before[name], to)
		}
		if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, sbx, "cat /root/state")); got != name {
			t.Errorf("%s reads %q after the move", name, got)
		}
	}
	volumeMoved(t, k)
	busy := sbxtest.WaitRunning(t, k, "busy")
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, busy, "kill -0 "+pids+" && echo alive")); got != "alive" {
		t.Errorf("busy's process %s after the move: %q", pids, got)
	}
	sbxtest.SetPaused(t, k, "paused", false)
	if sbx := sbxtest.WaitRunning(t, k, "paused"); sbx.Status.NodeName != to || sbx.Status.SandboxID != before["paused"] {
		t.Errorf("paused resumed as %s on %s", sbx.Status.SandboxID, sbx.Status.NodeName)
	}
	held(t, k, to)
	if _, err := c.Kubectl(context.Background(), "uncordon", from); err != nil {
		t.Fatal(err)
	}
}

// state makes the sandboxes on node from (to cordoned meanwhile): a
// template with a warm pool, one sandbox claiming it, one running a
// process, two plain, one paused; each writes its name to /root/state.
// It returns busy's process id.
func state(t *testing.T, k client.Client, from, to string) string {
	sbxtest.Template(t, k, "drn")
	sbxtest.Patch(t, k, &sandlotv1.Template{}, "drn", `{"spec":{"warmPool":1}}`)
	waitPool(t, k, from)
	cordon(t, to, true)
	names := append(slices.Clone(moving), "paused")
	sbxs := sbxtest.Create(t, k, "drn", "claimed") // first: the node's warm pod is its
	if pod := sbxtest.PodOf(t, k, sbxs["claimed"]); pod.Labels[sandlotv1.LabelPool] != "drn" {
		t.Fatalf("claimed runs in pod %s, not a pod of the warm pool", pod.Name)
	}
	for name, sbx := range sbxtest.Create(t, k, "drn", "busy", "plain-1", "plain-2", "paused") {
		sbxs[name] = sbx
	}
	sbxs["mounted"] = mounted(t, k, "drn")
	cordon(t, to, false)
	for _, name := range names {
		if sbxs[name].Status.NodeName != from {
			t.Fatalf("%s runs on %s, want %s", name, sbxs[name].Status.NodeName, from)
		}
		sbxtest.EnvdRun(t, k, sbxs[name], "echo "+name+" > /root/state")
	}
	pid := strings.TrimSpace(sbxtest.EnvdRun(t, k, sbxs["busy"], "nohup sleep 100000 >/dev/null 2>&1 & echo $!"))
	sbxtest.Pause(t, k, "paused")
	return pid
}

// held: with the other node cordoned, `kubectl sandlot drain` of to
// cordons it and fails naming each sandbox and why it cannot move; a
// drain of to is then held by their budget (and times out); they run on.
func held(t *testing.T, k client.Client, to string) {
	out, err := sandlotDrain(t, to)
	if err == nil || !strings.Contains(out, "cannot move") {
		t.Fatalf("kubectl sandlot drain %s with nowhere to go: %v\n%s", to, err, out)
	}
	for _, name := range moving {
		if !strings.Contains(out, "default/"+name+": no other node can run it") {
			t.Errorf("kubectl sandlot drain does not name %s and why:\n%s", name, out)
		}
	}
	t.Logf("kubectl sandlot drain %s: %v\n%s", to, err, tail(out))
	out, err = c.Kubectl(context.Background(), "drain", to, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s")
	if err == nil || !strings.Contains(out, "disruption budget") {
		t.Fatalf("a drain with nowhere to go: %v\n%s", err, tail(out))
	}
	for _, name := range moving {
		if sbx := get(t, k, name); sbx.Status.Phase != sandlotv1.SandboxRunning || sbx.Status.NodeName != to {
			t.Errorf("%s: %s on %s after a held drain", name, sbx.Status.Phase, sbx.Status.NodeName)
		}
	}
	t.Logf("a drain of %s with %s cordoned is held: %s", to, c.Nodes[0].Name, get(t, k, "busy").Annotations[sandlotv1.AnnotationMoveBlocked])
	cordon(t, to, false)
}

// downtime is one sandbox's time away from Running, and the phases and
// nodes it was seen in (what a failure shows).
type downtime struct {
	left, back time.Time
	from, to   string
	seen       []string // "<time> <phase> on <node>", one per change
	last       string   // the phase and node seen last
}

// watched is what watchDowntime saw: per sandbox, when it left Running
// and when it ran again; and how its polls went (a move missed between
// two polls says how far apart they were).
type watched struct {
	byName        map[string]*downtime
	polls, failed int
	maxGap        time.Duration
	lastErr       error
}

// watchDowntime polls the sandboxes every 100 ms until stopped, and once
// after.
func watchDowntime(k client.Client) (stop func() *watched) {
	w := &watched{byName: map[string]*downtime{}}
	done, finished := make(chan struct{}), make(chan struct{})
	last := time.Now()
	poll := func() {
		list := &sandlotv1.SandboxList{}
		if err := k.List(context.Background(), list, client.InNamespace("default")); err != nil {
			w.failed, w.lastErr = w.failed+1, err
			return
		}
		now := time.Now()
		w.polls, w.maxGap, last = w.polls+1, max(w.maxGap, now.Sub(last)), now
		for _, s := range list.Items {
			observe(w.byName, &s, now)
		}
	}
	go func() {
		defer close(finished)
		for {
			poll()
			select {
			case <-done:
				poll() // once more after stop: what the caller saw last is seen
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() *watched {
		close(done)
		<-finished
		return w
	}
}

func observe(seen map[string]*downtime, s *sandlotv1.Sandbox, now time.Time) {
	d := seen[s.Name]
	running := s.Status.Phase == sandlotv1.SandboxRunning
	state := fmt.Sprintf("%s on %q", s.Status.Phase, s.Status.NodeName)
	at := now.Format("15:04:05.000 ") + state
	if d != nil && d.last != state {
		d.seen, d.last = append(d.seen, at), state
	}
	switch {
	case d == nil && running:
		seen[s.Name] = &downtime{from: s.Status.NodeName, seen: []string{at}, last: state}
	case d != nil && !running && d.left.IsZero():
		d.left = now
	case d != nil && running && !d.left.IsZero() && d.back.IsZero() && s.Status.NodeName != d.from:
		d.back, d.to = now, s.Status.NodeName
	}
}

// report logs each moved sandbox's downtime and fails on one that did
// not move.
func report(t *testing.T, w *watched) {
	var lines []string
	for _, name := range moving {
		d := w.byName[name]
		if d == nil || d.back.IsZero() {
			t.Errorf("%s: no move seen: %s", name, history(d))
			continue
		}
		lines = append(lines, fmt.Sprintf("%-8s %s -> %s  down %v (%s)", name, d.from, d.to, d.back.Sub(d.left).Round(10*time.Millisecond), history(d)))
	}
	t.Logf("per-sandbox downtime (not Running -> Running on the other node; %d polls 100 ms apart, at most %v; %d failed %v; TCG):\n%s",
		w.polls, w.maxGap.Round(time.Millisecond), w.failed, w.lastErr, strings.Join(lines, "\n"))
}

func history(d *downtime) string {
	if d == nil {
		return "never seen Running"
	}
	return "seen " + strings.Join(d.seen, ", ")
}

func waitPool(t *testing.T, k client.Client, node string) {
	poll.Eventually(t, 5*time.Minute, "a warm pod of drn running on "+node, func() error {
		pods := &corev1.PodList{}
		if err := k.List(context.Background(), pods, client.InNamespace("default"),
			client.MatchingLabels{sandlotv1.LabelPool: "drn", sandlotv1.LabelSandbox: ""}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && !sandlotv1.IsStartSlot(p.Annotations) {
				return nil
			}
		}
		return fmt.Errorf("%d pool pods, none running on %s", len(pods.Items), node)
	})
}

func cordon(t *testing.T, node string, on bool) {
	t.Helper()
	verb := "uncordon"
	if on {
		verb = "cordon"
	}
	if _, err := c.Kubectl(context.Background(), verb, node); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, k client.Client, name string) *sandlotv1.Sandbox {
	t.Helper()
	s := &sandlotv1.Sandbox{}
	if err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// sandlotDrain runs `kubectl sandlot drain node` (the plugin built from
// this checkout) against the cluster and returns its output.
func sandlotDrain(t *testing.T, node string) (string, error) {
	t.Helper()
	plugin, err := sbxtest.BuildPlugin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plugin, "drain", node, "--timeout", "2m")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	b, err := cmd.CombinedOutput()
	return string(b), err
}
