package soak

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// kubeOps is the kubectl side of the churn: the plugin and kubectl, with
// the cluster's admin kubeconfig (the churn tests the product, not RBAC:
// test/isolation does that as a namespace user).
type kubeOps struct {
	k          client.Client
	ns         string
	kubeconfig string
	plugin     string // kubectl-sandlot built from this checkout
}

// nameOf is the Sandbox object of an E2B sandbox ID.
func (o *kubeOps) nameOf(ctx context.Context, id string) (string, error) {
	var list sandlotv1.SandboxList
	if err := o.k.List(ctx, &list, client.InNamespace(o.ns)); err != nil {
		return "", fmt.Errorf("list sandboxes: %w", err)
	}
	for _, s := range list.Items {
		if s.Status.SandboxID == id && s.DeletionTimestamp == nil {
			return s.Name, nil
		}
	}
	return "", fmt.Errorf("%w: no sandbox has ID %s", errLost, id)
}

// run runs a kubectl binary (kubectl or the plugin) with the cluster's
// kubeconfig; its output names the cause when it fails.
func (o *kubeOps) run(ctx context.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+o.kubeconfig)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return nil
}

// plugin runs `kubectl sandlot <verb> <sandbox> --wait`.
func (o *kubeOps) pluginVerb(ctx context.Context, verb, id string) error {
	name, err := o.nameOf(ctx, id)
	if err != nil {
		return err
	}
	return o.run(ctx, o.plugin, verb, name, "-n", o.ns, "--wait")
}

// deleteSnapshotsOf runs `kubectl delete snapshot` on the snapshots a
// fork of sandbox id left (the API keeps them for more forks).
func (o *kubeOps) deleteSnapshotsOf(ctx context.Context, id string) error {
	var list sandlotv1.SnapshotList
	if err := o.k.List(ctx, &list, client.InNamespace(o.ns)); err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	// --wait=false: a snapshot is held while a sandbox restored from it
	// lives (a fork whose kill failed); the leak check sees it go.
	args := []string{"delete", "snapshot", "-n", o.ns, "--ignore-not-found", "--wait=false"}
	for _, s := range list.Items {
		if s.Status.SandboxID == id && strings.HasPrefix(s.Name, "fork-") {
			args = append(args, s.Name)
		}
	}
	if len(args) == 6 {
		return nil
	}
	return o.run(ctx, "kubectl", args...)
}
