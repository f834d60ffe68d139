// Package e2e tests sandlot end to end on a real cluster on this machine
// (internal/cluster): the controller, kubelets, containerd with the sandlot
// shim, and microVMs under QEMU.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

func hostKernel(t *testing.T) string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestQuickstart is the README's flow: the sample applied with kubectl
// runs as a microVM that answers on its pod IP, logs, and execs; deleting
// it removes pod, VM, netns and files.
func TestQuickstart(t *testing.T) {
	k := sbxtest.Client(t, c)
	ctx := context.Background()
	// The netns of the pods the chart runs (agent, controller, API) stay.
	before := map[string]map[string]bool{}
	for _, n := range c.Nodes {
		before[n.Name] = netnsOf(n)
	}
	if _, err := c.Kubectl(ctx, "apply", "-f", filepath.Join(cluster.RepoRoot(), "config", "samples", "quickstart.yaml")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbxtest.Delete(t, k, "hello") })
	sbx := sbxtest.WaitRunning(t, k, "hello")
	t.Logf("sandbox hello Running on %s at %s", sbx.Status.NodeName, sbx.Status.PodIP)
	resp, err := http.Get("http://" + sbx.Status.PodIP + ":49983/health")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("envd /health at the pod IP: %v %v", resp, err)
	}
	host := hostKernel(t)
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, sbx, "uname -r; echo $GREETING")); !strings.Contains(got, "hello from sandlot") || strings.HasPrefix(got, host) {
		t.Fatalf("envd ran %q (host kernel %s)", got, host)
	}
	// The image's start-up line went to the template's builder (the sandbox
	// restored its base snapshot); what the app writes after the restore
	// reaches the pod's log: the image's `sleep` holds its stdout.
	sbxtest.EnvdRun(t, k, sbx, `for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = sleep ] && echo written-after-restore > $p/fd/1 && break; done`)
	poll.Eventually(t, 30*time.Second, "kubectl logs", func() error {
		out, err := c.Kubectl(ctx, "logs", sbx.Status.PodName) // hello's, unless it claimed a start slot
		if err == nil && !strings.Contains(out, "written-after-restore") {
			err = fmt.Errorf("logs %q", out)
		}
		return err
	})
	out, err := c.Kubectl(ctx, "exec", sbx.Status.PodName, "--", "uname", "-r")
	if err != nil || strings.TrimSpace(out) == host {
		t.Fatalf("kubectl exec uname -r: %q %v (host %s): not inside the VM", out, err, host)
	}
	uid := podUID(t, k, sbx.Status.PodName)
	sbxtest.Delete(t, k, "hello")
	// The template too, as the quickstart ends: its start slots hold pods
	// (and netns) of their own on the node.
	if _, err := c.Kubectl(ctx, "delete", "--wait", "-f", filepath.Join(cluster.RepoRoot(), "config", "samples", "quickstart.yaml"),
		"--ignore-not-found"); err != nil {
		t.Fatal(err)
	}
	node := nodeOf(t, sbx.Status.NodeName)
	poll.Eventually(t, time.Minute, "VM, netns and files gone", func() error { return vmGone(node, uid, before[node.Name]) })
}

func podUID(t *testing.T, k client.Client, name string) string {
	var pod corev1.Pod
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	return string(pod.UID)
}

func nodeOf(t *testing.T, name string) *cluster.Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// netnsOf are the network namespaces containerd holds on n.
func netnsOf(n *cluster.Node) map[string]bool {
	m, _ := filepath.Glob(filepath.Join(n.CRI.Dir, "state", "io.containerd.grpc.v1.cri", "netns", "*"))
	set := map[string]bool{}
	for _, p := range m {
		set[p] = true
	}
	return set
}

// vmGone checks no QEMU, pod directory, netns (besides those in before)
// or guest RAM is left of a pod.
func vmGone(n *cluster.Node, podUID string, before map[string]bool) error {
	if pid, _, ok := sbxtest.FindQEMU(podUID); ok {
		return fmt.Errorf("QEMU still runs: pid %d", pid)
	}
	if _, err := os.Stat(filepath.Join(n.SandlotRoot, "pods", podUID)); err == nil {
		return fmt.Errorf("pod directory still there")
	}
	var left []string
	for p := range netnsOf(n) {
		if !before[p] {
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("netns left: %v", left)
	}
	return nil
}

// TestSpreadAndCordon: sandboxes land on both nodes; a cordoned node
// gets no new ones.
func TestSpreadAndCordon(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	placed := sbxtest.Create(t, k, "small", "spread-a", "spread-b", "spread-c", "spread-d")
	nodes := map[string]int{}
	for _, s := range placed {
		nodes[s.Status.NodeName]++
	}
	if len(nodes) != 2 {
		t.Fatalf("4 sandboxes on nodes %v, want both nodes used", nodes)
	}
	ctx := context.Background()
	cordoned := c.Nodes[0].Name
	if _, err := c.Kubectl(ctx, "cordon", cordoned); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(ctx, "uncordon", cordoned) })
	for _, s := range sbxtest.Create(t, k, "small", "cordon-a", "cordon-b") {
		if s.Status.NodeName == cordoned {
			t.Fatalf("sandbox %s placed on cordoned node %s", s.Name, cordoned)
		}
	}
}

// TestKubeletDeath: a node whose kubelet dies has its sandboxes marked not
// Ready within 30 s (node-monitor-grace-period 20 s).
func TestKubeletDeath(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbx := sbxtest.Create(t, k, "small", "orphan")["orphan"]
	node := sbx.Status.NodeName
	killed := time.Now()
	if err := c.KillKubelet(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RestartKubelet(node); err != nil {
			t.Errorf("restart the kubelet of %s: %v", node, err)
		}
	})
	poll.Eventually(t, 30*time.Second, "sandbox not Ready after its kubelet died", func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &s); err != nil {
			return err
		}
		if meta.IsStatusConditionFalse(s.Status.Conditions, sandlotv1.ConditionReady) {
			return nil
		}
		return fmt.Errorf("Ready is not False")
	})
	t.Logf("sandbox on %s not Ready %v after its kubelet was killed", node, time.Since(killed).Round(time.Second))
}

// TestServiceFromPod: a pod reaches the API server through the
// `kubernetes` Service (kube-proxy's rules), TLS verified with its
// service account.
func TestServiceFromPod(t *testing.T) {
	k := sbxtest.Client(t, c)
	script := `import json, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
ctx = ssl.create_default_context(cafile=sa + "ca.crt")
req = urllib.request.Request("https://10.0.0.1:443/version", headers={"Authorization": "Bearer " + open(sa + "token").read()})
print(json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"])`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "apicheck", Namespace: "default"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "check", Image: sbxtest.DefaultImage(t), ImagePullPolicy: corev1.PullNever, Command: []string{"python3", "-c", script}}}}}
	if err := k.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), pod) })
	poll.Eventually(t, 2*time.Minute, "apicheck pod done", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.Phase == corev1.PodFailed {
			out, _ := c.Kubectl(context.Background(), "logs", "apicheck")
			t.Fatalf("apicheck failed: %s", out)
		}
		if pod.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s", pod.Status.Phase)
		}
		return nil
	})
	out, err := c.Kubectl(context.Background(), "logs", "apicheck")
	if err != nil || !strings.Contains(out, cluster.K8sVersion) {
		t.Fatalf("apicheck printed %q (%v), want %s", out, err, cluster.K8sVersion)
	}
}

// TestSnapshotRestore: the node agent snapshots a running sandbox into the
// local store (Ready, NotApplicable remotely); a sandbox from that
// snapshot restores it — a file and an in-memory value from before are
// there — and the agent reports VMReady on both.
func TestSnapshotRestore(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	parent := sbxtest.Create(t, k, "small", "parent")["parent"]
	sbxtest.EnvdRun(t, k, parent, sbxtest.WriteState)
	ctx := context.Background()
	snap := sbxtest.Snapshot(t, k, "parent-1", "parent")
	st := snap.Status
	if st.RemoteStatus != sandlotv1.RemoteNotApplicable || st.TotalBytes == 0 || st.Fingerprint.QEMU == "" || st.Location == "" ||
		len(st.BaseDiskSHA256) != 64 {
		t.Fatalf("snapshot status %+v", st)
	}
	t.Logf("snapshot %s on %s: %d bytes at %s", snap.Name, st.NodeName, st.TotalBytes, st.Location)
	var node corev1.Node
	if err := k.Get(ctx, client.ObjectKey{Name: st.NodeName}, &node); err != nil {
		t.Fatal(err)
	}
	if got := node.Labels[sandlotv1.LabelFingerprint]; got == "" || got != st.Fingerprint.Key() {
		t.Fatalf("node %s fingerprint label %q, snapshot fingerprint %q", node.Name, got, st.Fingerprint.Key())
	}
	restored := sbxtest.FromSnapshot(t, k, "child", snap.Name)
	if got := sbxtest.EnvdRun(t, k, restored, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("restored sandbox has %q", got)
	}
	for _, name := range []string{"parent", "child"} {
		poll.Eventually(t, 30*time.Second, name+" VMReady", func() error {
			var s sandlotv1.Sandbox
			if err := k.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(s.Status.Conditions, sandlotv1.ConditionVMReady) {
				return fmt.Errorf("VMReady not True: %+v", meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionVMReady))
			}
			return nil
		})
	}
}

// TestPauseResume: pausing makes the agent write the pause package and the
// pod go (Sandbox Paused); resuming restores it on the node — same
// sandbox ID, a file and an in-memory value intact — and the package is
// released.
func TestPauseResume(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbx := sbxtest.Create(t, k, "small", "napper")["napper"]
	sbxtest.EnvdRun(t, k, sbx, sbxtest.WriteState)
	sbxtest.SetPaused(t, k, "napper", true)
	poll.Eventually(t, 2*time.Minute, "Paused, pod gone", func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &s); err != nil {
			return err
		}
		// Its pod by the name its status gave (a start slot it claimed is
		// not named after it).
		if err := sbxtest.PodsGone(context.Background(), k, sbx.Namespace, sbx.Name, sbx.Status.PodName); err != nil {
			return err
		}
		if s.Status.Phase != sandlotv1.SandboxPaused {
			return fmt.Errorf("phase %s (%s)", s.Status.Phase, s.Status.Message)
		}
		return nil
	})
	sbxtest.SetPaused(t, k, "napper", false)
	resumed := sbxtest.WaitRunning(t, k, "napper")
	if resumed.Status.SandboxID != sbx.Status.SandboxID {
		t.Fatalf("sandbox ID %s after resume, %s before", resumed.Status.SandboxID, sbx.Status.SandboxID)
	}
	if got := sbxtest.EnvdRun(t, k, resumed, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("resumed sandbox has %q", got)
	}
	poll.Eventually(t, time.Minute, "pause package released", func() error {
		err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &sandlotv1.PausedSandbox{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("PausedSandbox still there (%v)", err)
	})
}
