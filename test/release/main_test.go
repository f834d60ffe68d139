// Package release drives a running `NODES=2 make up` cluster — sandlot
// installed by its Helm chart, the s3 store on a local MinIO — end to end,
// as a user would: the quickstart sample, `kubectl sandlot` (exec,
// snapshot, clone, pause, resume on the other node, rollback, version,
// ls templates, -o json|name, logs, cp), the E2B
// SDK through the chart's API Service, the controller's metrics,
// restarts of the controller, the agents and containerd, `helm upgrade`
// and `helm uninstall`. `make e2e` runs it; `make down` after it checks
// the host is left clean.
package release

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
)

// env is the cluster under test.
type env struct {
	dir        string // the make up cluster's directory
	kubeconfig string
	plugin     string // kubectl-sandlot built for the run
	k          client.Client
}

var e env

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(filepath.Dir(e.plugin))
	os.Exit(code)
}

func setup() error {
	ctrllog.SetLogger(logr.Discard())
	e.dir = os.Getenv("SANDLOT_CLUSTER_DIR")
	if e.dir == "" {
		e.dir = "/var/tmp/sandlot-up"
	}
	e.kubeconfig = filepath.Join(e.dir, "pki", "admin.kubeconfig")
	if _, err := os.Stat(filepath.Join(e.dir, "ready")); err != nil {
		return fmt.Errorf("no running cluster in %s: run `NODES=2 make up` first", e.dir)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := sandlotv1.AddToScheme(scheme); err != nil {
		return err
	}
	if e.k, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	if err := e.k.List(context.Background(), nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}); err != nil {
		return err
	}
	if len(nodes.Items) != 2 {
		return fmt.Errorf("%d runtime nodes: the release test needs two (NODES=2 make up)", len(nodes.Items))
	}
	tmp, err := os.MkdirTemp("", "sandlot-release-")
	if err != nil {
		return err
	}
	e.plugin = filepath.Join(tmp, "kubectl-sandlot")
	ldflags, err := cluster.VersionLDFlags()
	if err != nil {
		return err
	}
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", e.plugin, "./cmd/kubectl-sandlot")
	build.Dir = cluster.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build kubectl-sandlot: %v\n%s", err, out)
	}
	npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	npm.Dir = filepath.Join(cluster.RepoRoot(), "test", "e2b")
	if out, err := npm.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci in test/e2b (the pinned E2B SDK; needs Node 20 and npm): %v\n%s", err, out)
	}
	return nil
}
