package kube_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/test/kube"
)

// TestSamplesDryRun: the API server accepts every sample as kubectl sends it.
func TestSamplesDryRun(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl not found: install kubectl (1.32 or newer) to check config/samples against the API server")
	}
	env, err := kube.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	samples := filepath.Join(kube.Root(), "config", "samples")
	entries, err := os.ReadDir(samples)
	if err != nil || len(entries) < 3 {
		t.Fatalf("config/samples: %v (%d files)", err, len(entries))
	}
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-n", "default",
		"-f", samples).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -f config/samples: %v\n%s", err, out)
	}
	for _, want := range []string{"template.sandlot.dev/python created (server dry run)", "sandbox.sandlot.dev/hello created (server dry run)",
		"snapshot.sandlot.dev/hello-snap created (server dry run)", "sandbox.sandlot.dev/hello-clone created (server dry run)",
		"pausedsandbox.sandlot.dev/hello-paused-example created (server dry run)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl output lacks %q:\n%s", want, out)
		}
	}
}
