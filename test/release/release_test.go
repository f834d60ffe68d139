package release

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

const ns = "default"

// TestRelease runs the steps in order; a failed step ends the run.
func TestRelease(t *testing.T) {
	before := createCounts(t)
	steps := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"quickstart", quickstart},
		{"exec", execInVM},
		{"the agent's per-sandbox gauges", agentGauges},
		{"snapshot and clone 5", snapshotAndClone},
		{"pause, resume on the other node", pauseResumeElsewhere},
		{"rollback", rollback},
		{"kubectl sandlot version, ls templates, -o, logs, cp, port-forward", pluginLikeKubectl},
		{"E2B SDK through the API Service", e2bSmoke},
		{"create histogram counts the creates", func(t *testing.T) { checkCreateCounts(t, before) }},
		{"E2B template build through the API Service", e2bBuild},
		{"warm pool claims through kubectl and E2B", warmPoolClaims},
		{"restarts lose nothing", restarts},
		{"helm upgrade keeps sandboxes", helmUpgrade},
		{"helm uninstall", helmUninstall},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.fn) {
			t.FailNow()
		}
	}
}

// creates the steps make, by the create histogram's source label.
var creates = map[string]int{}

func quickstart(t *testing.T) {
	kubectl(t, "apply", "-f", filepath.Join(cluster.RepoRoot(), "config", "samples", "quickstart.yaml"))
	creates["template"]++
	running(t, "hello")
}

func execInVM(t *testing.T) {
	guest := strings.TrimSpace(plugin(t, "exec", "hello", "--", "uname", "-r"))
	host, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatalf("uname -r on the host: %v", err)
	}
	if guest == "" || guest == strings.TrimSpace(string(host)) {
		t.Fatalf("kubectl sandlot exec ran on kernel %q, the host's is %q", guest, host)
	}
	plugin(t, "exec", "hello", "--", "sh", "-c", "echo kept > /root/state")
}

func snapshotAndClone(t *testing.T) {
	out := plugin(t, "snapshot", "hello", "--name", "hello-snap", "--wait")
	if !strings.Contains(out, "remoteStatus") {
		t.Fatalf("snapshot output shows no remoteStatus:\n%s", out)
	}
	plugin(t, "clone", "hello-snap", "--count", "5", "--wait")
	clones := sandboxesFrom(t, "hello-snap")
	if len(clones) != 5 {
		t.Fatalf("%d clones of hello-snap, want 5", len(clones))
	}
	creates["snapshot"] += 5
	for i, c := range clones {
		running(t, c)
		if got := vmRun(t, c, "cat /root/state"); got != "kept" {
			t.Fatalf("clone %s reads %q, want the parent's kept", c, got)
		}
		vmRun(t, c, fmt.Sprintf("echo %d > /root/own", i))
	}
	for i, c := range clones { // each kept its write to itself
		if got := vmRun(t, c, "cat /root/own"); got != strconv.Itoa(i) {
			t.Fatalf("clone %s reads %q, want its own %d", c, got, i)
		}
	}
	plugin(t, append([]string{"delete", "--wait"}, clones...)...)
}

func pauseResumeElsewhere(t *testing.T) {
	id, node := sandboxOf(t, "hello").Status.SandboxID, sandboxOf(t, "hello").Status.NodeName
	plugin(t, "pause", "hello", "--wait")
	poll.Eventually(t, 3*time.Minute, "PausedSandbox hello remote Ready", func() error {
		out := kubectl(t, "get", "psbx", "hello", "-o", "jsonpath={.status.remoteStatus}")
		if out != string(sandlotv1.RemoteReady) {
			return fmt.Errorf("remoteStatus %q", out)
		}
		return nil
	})
	t.Log(kubectl(t, "get", "psbx"))
	kubectl(t, "cordon", node)
	defer kubectl(t, "uncordon", node)
	plugin(t, "resume", "hello", "--wait")
	s := sandboxOf(t, "hello")
	if s.Status.SandboxID != id || s.Status.NodeName == node {
		t.Fatalf("resumed as %s on %s; want %s on another node than %s", s.Status.SandboxID, s.Status.NodeName, id, node)
	}
	if got := vmRun(t, "hello", "cat /root/state"); got != "kept" {
		t.Fatalf("resumed on %s reading %q, want kept", s.Status.NodeName, got)
	}
}

func rollback(t *testing.T) {
	plugin(t, "snapshot", "hello", "--name", "hello-here", "--wait")
	vmRun(t, "hello", "echo changed > /root/state")
	plugin(t, "rollback", "hello", "--to", "hello-here", "--wait")
	if got := vmRun(t, "hello", "cat /root/state"); got != "kept" {
		t.Fatalf("after the rollback /root/state is %q, want kept", got)
	}
}

// e2bSmoke runs test/e2b/smoke.mjs with the unchanged SDK against the
// chart's API Service, with a key issued in the API's pod.
func e2bSmoke(t *testing.T) {
	url, key := chartAPI(t)
	cmd := exec.Command("node", "smoke.mjs")
	cmd.Dir = filepath.Join(cluster.RepoRoot(), "test", "e2b")
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		dumpAPI(t)
		// Last, so that a log cut to its tail still shows which call failed.
		t.Fatalf("the E2B SDK smoke failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	creates["template"]++
}

// chartAPI is the chart's API Service URL and a key issued in its pod.
func chartAPI(t *testing.T) (url, key string) {
	t.Helper()
	return serviceURL(t, cluster.ReleaseNamespace, "sandlot-api"), apiKey(t)
}

// dumpAPI logs what the API, the sandboxes and their events say, so a
// failed SDK call can be traced to its cause in a CI log.
func dumpAPI(t *testing.T) {
	for _, args := range [][]string{
		{"-n", cluster.ReleaseNamespace, "logs", "deploy/sandlot-api", "--tail=60"},
		{"-n", cluster.ReleaseNamespace, "logs", "deploy/sandlot-api", "--previous", "--tail=30"},
		{"get", "sandboxes,pausedsandboxes", "-o", "wide"},
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "events", "--sort-by=.lastTimestamp"},
	} {
		out, err := exec.Command("kubectl", append([]string{"--kubeconfig", e.kubeconfig}, args...)...).CombinedOutput()
		t.Logf("kubectl %s (%v):\n%s", strings.Join(args, " "), err, out)
	}
}

// checkCreateCounts: the create histogram counted each create once, by
// its source, and still does a while later (no late second count). A
// template's or a snapshot's sandbox that claimed a start slot (the chart
// keeps one per node and template) counts as "slot".
func checkCreateCounts(t *testing.T, before map[string]float64) {
	if err := createCountsMatch(before, createCounts(t)); err != nil {
		t.Fatal(err)
	}
	poll.Consistently(t, 5*time.Second, "the create counts unchanged", func() error {
		return createCountsMatch(before, createCounts(t))
	})
}

// createCountsMatch is nil when the counts grew from before to after by
// the creates the steps made.
func createCountsMatch(before, after map[string]float64) error {
	grew := func(source string) int { return int(after[source] - before[source]) }
	slots := grew("slot")
	var errs []error
	for source, n := range creates {
		if got := grew(source); got > n || got < n-slots {
			errs = append(errs, fmt.Errorf("sandlot_sandbox_create_seconds_count{source=%q} grew by %d, want %d less what claimed slots",
				source, got, n))
		}
		slots -= n - grew(source)
	}
	if slots != 0 {
		errs = append(errs, fmt.Errorf("%d slot starts the steps did not make", slots))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w (before %v, after %v)", errors.Join(errs...), before, after)
	}
	return nil
}

// restarts deletes the controller's and the agents' pods and restarts
// both nodes' containerd while a clone starts: every sandbox and
// snapshot is still there and answers after.
func restarts(t *testing.T) {
	hello := sandboxOf(t, "hello")
	plugin(t, "clone", "hello-here", "--count", "1")
	kubectl(t, "-n", cluster.ReleaseNamespace, "delete", "pod", "-l", "app.kubernetes.io/name=sandlot-controller", "--wait=false")
	kubectl(t, "-n", cluster.ReleaseNamespace, "delete", "pod", "-l", "app.kubernetes.io/name=sandlot-agent", "--wait=false")
	for _, n := range nodes(t) {
		ctl := exec.Command(filepath.Join(cluster.RepoRoot(), "bin", "sandlot-cluster"), "restart-containerd", n, "-dir", e.dir)
		if out, err := ctl.CombinedOutput(); err != nil {
			t.Fatalf("restart containerd on %s: %v\n%s", n, err, out)
		}
	}
	kubectl(t, "-n", cluster.ReleaseNamespace, "rollout", "status", "deploy/sandlot-controller", "--timeout=3m")
	kubectl(t, "-n", cluster.ReleaseNamespace, "rollout", "status", "ds/sandlot-agent", "--timeout=3m")
	clone := sandboxesFrom(t, "hello-here")
	if len(clone) != 1 {
		t.Fatalf("%d clones of hello-here, want 1", len(clone))
	}
	running(t, clone[0])
	after := sandboxOf(t, "hello")
	if after.Status.PodName != hello.Status.PodName || after.Status.Phase != sandlotv1.SandboxRunning {
		t.Fatalf("hello is %s in pod %s after the restarts, was Running in %s", after.Status.Phase, after.Status.PodName, hello.Status.PodName)
	}
	if got := vmRun(t, "hello", "cat /root/state"); got != "kept" {
		t.Fatalf("hello reads %q after the restarts", got)
	}
	for _, name := range []string{"hello-snap", "hello-here"} {
		snap := &sandlotv1.Snapshot{}
		if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, snap); err != nil ||
			snap.Status.Phase != sandlotv1.DataReady {
			t.Fatalf("snapshot %s after the restarts: %v %s", name, err, snap.Status.Phase)
		}
	}
	plugin(t, "delete", "--wait", clone[0])
}

// helmUpgrade upgrades the release with a changed value: the running
// sandbox keeps its pod.
func helmUpgrade(t *testing.T) {
	pod := sandboxOf(t, "hello").Status.PodName
	uid := podUID(t, pod)
	cfg, err := cluster.HelmConfig(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := cluster.LoadChart()
	if err != nil {
		t.Fatal(err)
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.ReuseValues, up.Wait, up.Timeout = cluster.ReleaseNamespace, true, true, 5*time.Minute
	// Not a sandlot.dev/ key: the chart's admission policy refuses those on
	// any pod but the controller's own writes, its components' included.
	changed := map[string]any{"controller": map[string]any{"podAnnotations": map[string]any{"e2e.sandlot.test/upgraded": "yes"}},
		"api": map[string]any{"podAnnotations": map[string]any{"e2e.sandlot.test/upgraded": "yes"}}}
	rel, err := up.Run(cluster.ReleaseName, ch, changed)
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	t.Logf("release %s at revision %d", rel.Name, rel.Version)
	if got := podUID(t, pod); got != uid || sandboxOf(t, "hello").Status.Phase != sandlotv1.SandboxRunning {
		t.Fatalf("after the upgrade hello's pod %s has UID %s (was %s)", pod, got, uid)
	}
	if got := vmRun(t, "hello", "cat /root/state"); got != "kept" {
		t.Fatalf("hello reads %q after the upgrade", got)
	}
}

// helmUninstall deletes what the run made, then the release.
func helmUninstall(t *testing.T) {
	kubectl(t, "delete", "-f", filepath.Join(cluster.RepoRoot(), "config", "samples", "quickstart.yaml"), "--wait")
	kubectl(t, "delete", "snapshot", "--all", "--wait")
	cfg, err := cluster.HelmConfig(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, 3*time.Minute
	if _, err := un.Run(cluster.ReleaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	poll.Eventually(t, 2*time.Minute, "the release's pods gone", func() error {
		pods := &corev1.PodList{}
		if err := e.k.List(context.Background(), pods, client.InNamespace(cluster.ReleaseNamespace)); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		return nil
	})
}

// --- helpers ---

func plugin(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, e.plugin, append([]string{"-n", ns}, args...)...)
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "kubectl", args...))
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// vmRun runs a shell command in a sandbox's VM through kubectl sandlot exec.
func vmRun(t *testing.T, sandbox, script string) string {
	t.Helper()
	return strings.TrimSpace(plugin(t, "exec", sandbox, "--", "sh", "-c", script))
}

func sandboxOf(t *testing.T, name string) *sandlotv1.Sandbox {
	t.Helper()
	s := &sandlotv1.Sandbox{}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func running(t *testing.T, name string) {
	t.Helper()
	poll.Eventually(t, 5*time.Minute, "sandbox "+name+" usable", func() error {
		s := sandboxOf(t, name)
		if s.Status.Phase.Terminal() {
			t.Fatalf("sandbox %s %s: %s", name, s.Status.Phase, s.Status.Message)
		}
		if !s.Usable(0) {
			return fmt.Errorf("%s: %s", s.Status.Phase, s.Status.Message)
		}
		return nil
	})
}

func sandboxesFrom(t *testing.T, snapshot string) []string {
	t.Helper()
	list := &sandlotv1.SandboxList{}
	if err := e.k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		if s.Spec.Source.Snapshot == snapshot && s.DeletionTimestamp == nil {
			out = append(out, s.Name)
		}
	}
	return out
}

func nodes(t *testing.T) []string {
	t.Helper()
	list := &corev1.NodeList{}
	if err := e.k.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	return out
}

func podUID(t *testing.T, name string) string {
	t.Helper()
	pod := &corev1.Pod{}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	return string(pod.UID)
}

func serviceURL(t *testing.T, namespace, name string) string {
	t.Helper()
	svc := &corev1.Service{}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, svc); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
}

// createCounts reads the controller's create histogram counts by source
// from its metrics Service.
func createCounts(t *testing.T) map[string]float64 {
	t.Helper()
	hostPort := strings.TrimPrefix(serviceURL(t, cluster.ReleaseNamespace, "sandlot-controller-metrics"), "http://")
	var out map[string]float64
	poll.Eventually(t, time.Minute, "the controller's metrics", func() error {
		page, err := scrape(t, hostPort)
		if err != nil {
			return err
		}
		out = map[string]float64{}
		sc := bufio.NewScanner(strings.NewReader(page))
		for sc.Scan() {
			l := sc.Text()
			rest, ok := strings.CutPrefix(l, `sandlot_sandbox_create_seconds_count{source="`)
			if !ok {
				continue
			}
			source, value, _ := strings.Cut(rest, `"} `)
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return fmt.Errorf("metrics line %q: %w", l, err)
			}
			out[source] = v
		}
		return sc.Err()
	})
	return out
}
