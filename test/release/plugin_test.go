package release

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// pluginLikeKubectl runs the plugin's kubectl-like commands against the
// cluster: version, ls templates, ls -o json|name, and, on a sandbox of
// its own (created with -o name; with the chart's start slots its pod is
// not named after it), exec, logs, cp both ways and port-forward, each checked
// against what the cluster or the VM says.
func pluginLikeKubectl(t *testing.T) {
	pluginVersion(t)
	lsTemplates(t)
	lsJSON(t)

	out := plugin(t, "create", "--template", "python", "--lifetime", "10m", "--wait", "--timeout", "5m", "-o", "name")
	creates["template"]++
	name, ok := strings.CutPrefix(strings.TrimSpace(out), "sandbox.sandlot.dev/")
	if !ok || strings.Contains(name, "\n") {
		t.Fatalf("create -o name printed %q, want sandbox.sandlot.dev/NAME alone", out)
	}
	s := sandboxOf(t, name)
	t.Logf("sandbox %s runs in pod %s", name, s.Status.PodName)
	if s.Spec.TimeoutSeconds == nil || *s.Spec.TimeoutSeconds != 600 {
		t.Fatalf("create --lifetime 10m: spec.timeoutSeconds %v, want 600", s.Spec.TimeoutSeconds)
	}
	if got := vmRun(t, name, "echo through-its-pod"); got != "through-its-pod" {
		t.Fatalf("exec in %s: %q", name, got)
	}
	pluginLogs(t, name)
	pluginCp(t, name)
	pluginPortForward(t, name)
	if out := plugin(t, "delete", name, "--wait", "-o", "name"); out != "sandbox.sandlot.dev/"+name+"\n" {
		t.Fatalf("delete -o name printed %q", out)
	}
}

// pluginVersion: the plugin's stamped version (the chart's appVersion),
// the API server's version, the controller's image tag, and every
// running component's own --version — the same release everywhere.
func pluginVersion(t *testing.T) {
	out := plugin(t, "version")
	var kv struct {
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(kubectl(t, "version", "-o", "json")), &kv); err != nil || kv.ServerVersion.GitVersion == "" {
		t.Fatalf("kubectl version -o json: %v", err)
	}
	ch, err := cluster.LoadChart()
	if err != nil {
		t.Fatal(err)
	}
	image := kubectl(t, "-n", cluster.ReleaseNamespace, "get", "deploy", "-l", "app.kubernetes.io/name=sandlot-controller",
		"-o", `jsonpath={.items[0].spec.template.spec.containers[?(@.name=="controller")].image}`)
	want := []string{"Client Version: " + ch.AppVersion() + " (", "Server Version: " + kv.ServerVersion.GitVersion + "\n",
		"Controller Version: " + ch.AppVersion() + " (" + image + " in Deployment " + cluster.ReleaseNamespace + "/sandlot-controller)"}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("kubectl sandlot version lacks %q:\n%s", w, out)
		}
	}
	componentVersions(t, ch.AppVersion())
	// The guest agent in hello's VM, as its node's agent reports it (the
	// wide output's Guest column).
	if got := sandboxOf(t, "hello").Status.GuestVersion; got != ch.AppVersion() {
		t.Errorf("hello's guestVersion %q, want %s", got, ch.AppVersion())
	}
	if out := kubectl(t, "get", "sbx", "hello", "-o", "wide"); !strings.Contains(out, "GUEST") || !strings.Contains(out, ch.AppVersion()) {
		t.Errorf("kubectl get sbx -o wide shows no guest version:\n%s", out)
	}
}

// componentVersions: each component, asked in its pod, reports the
// release's version: the controller, the API, and each node's agent and
// the shim its image installs.
func componentVersions(t *testing.T, want string) {
	var v struct {
		Components []struct{ Component, Pod, Node, Version, Error string }
	}
	if err := json.Unmarshal([]byte(plugin(t, "version", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, c := range v.Components {
		if c.Version != want || c.Error != "" {
			t.Errorf("%s in pod %s reports %q (%s), want %s", c.Component, c.Pod, c.Version, c.Error, want)
		}
		count[c.Component]++
	}
	wantCount := map[string]int{"sandlot-controller": 1, "sandlot-api": 1, "sandlot-agent": 2, "containerd-shim-sandlot-v2": 2}
	if fmt.Sprint(count) != fmt.Sprint(wantCount) {
		t.Errorf("components %v, want %v", count, wantCount)
	}
}

// lsTemplates: python's row has its image and the count of its Ready
// base snapshots of the current revision, as its status has them.
func lsTemplates(t *testing.T) {
	poll.Eventually(t, time.Minute, "ls templates shows python as its status", func() error {
		tpl := &sandlotv1.Template{}
		if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "python"}, tpl); err != nil {
			return err
		}
		ready, total := 0, 0
		for _, b := range tpl.Status.BaseSnapshots {
			if b.Revision == tpl.Status.BaseRevision {
				total++
				if b.Phase == sandlotv1.BaseReady {
					ready++
				}
			}
		}
		out := plugin(t, "ls", "templates")
		want := fmt.Sprintf(`(?m)^python +%s +%d/%d +\d+/\d+ `, regexp.QuoteMeta(tpl.Spec.Image), ready, total)
		if ready == 0 || !regexp.MustCompile(want).MatchString(out) {
			return fmt.Errorf("want a row matching %s (%d Ready bases):\n%s", want, ready, out)
		}
		return nil
	})
}

// lsJSON: -o json is a List of the real Sandboxes (hello with its pod),
// -o name their kind.group/name.
func lsJSON(t *testing.T) {
	var list sandlotv1.SandboxList
	out := plugin(t, "ls", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.Kind != "List" {
		t.Fatalf("ls -o json is no List (%v):\n%s", err, out)
	}
	hello := sandboxOf(t, "hello")
	found := false
	for _, s := range list.Items {
		if s.Name == "hello" {
			found = s.Kind == "Sandbox" && s.APIVersion == "sandlot.dev/v1alpha1" && s.UID == hello.UID &&
				s.Status.PodName == hello.Status.PodName && s.Status.PodName != ""
		}
	}
	if !found {
		t.Fatalf("ls -o json has no Sandbox hello in pod %s:\n%s", hello.Status.PodName, out)
	}
	if out := plugin(t, "ls", "-o", "name"); !strings.Contains(out, "sandbox.sandlot.dev/hello\n") {
		t.Fatalf("ls -o name:\n%s", out)
	}
}

// pluginLogs: a line written to the guest's log FIFO comes out of logs.
func pluginLogs(t *testing.T, name string) {
	marker := "sandlot-e2e-log-" + randomHex(t)
	vmRun(t, name, "[ -p /run/sandlot/log ] && echo "+marker+" > /run/sandlot/log")
	poll.Eventually(t, time.Minute, "logs shows the line", func() error {
		if out := plugin(t, "logs", name, "--tail", "200"); !strings.Contains(out, marker) {
			return fmt.Errorf("no %s in:\n%s", marker, out)
		}
		return nil
	})
}

// pluginCp copies a file and a tree into the VM and back.
func pluginCp(t *testing.T, name string) {
	dir := t.TempDir()
	content, deep := randomHex(t), randomHex(t)
	if err := os.MkdirAll(filepath.Join(dir, "tree", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, c := range map[string]string{"in.txt": content, "tree/sub/deep": deep} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plugin(t, "cp", filepath.Join(dir, "in.txt"), name+":/tmp/e2e-in.txt")
	plugin(t, "cp", filepath.Join(dir, "tree"), name+":/tmp/")
	if got := vmRun(t, name, "cat /tmp/e2e-in.txt; echo; cat /tmp/tree/sub/deep"); got != content+"\n"+deep {
		t.Fatalf("the VM reads %q after cp in, want %q and %q", got, content, deep)
	}
	plugin(t, "cp", name+":/tmp/e2e-in.txt", filepath.Join(dir, "out.txt"))
	plugin(t, "cp", name+":/tmp/tree", filepath.Join(dir, "back"))
	for p, want := range map[string]string{"out.txt": content, "back/sub/deep": deep} {
		if got, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(got) != want {
			t.Fatalf("cp out: %s is %q (%v), want %q", p, got, err, want)
		}
	}
}

// lockedBuffer is a buffer a test reads while a process writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
