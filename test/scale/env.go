package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
)

// Namespace holds the simulated workload's sandboxes and templates: a
// team of the API's (the chart's api.teams).
const Namespace = "scale"

// Env is sandlot as its Helm chart installs it — the sandlot-controller
// and sandlot-api Deployment pods, under the chart's service accounts,
// RBAC and admission policies — on a cluster (internal/cluster) whose one
// real node runs only them (Configure). The simulated fleet's Nodes are
// the sandbox nodes.
type Env struct {
	Cluster *cluster.Cluster
	Config  *rest.Config
	Scheme  *runtime.Scheme
	Admin   client.Client
	APIURL  string
	APIKey  string
}

// ControllerMemory is the controller's memory limit in these runs. The
// chart's default (256Mi) holds about 2,000 sandboxes (~70 KiB each with
// its pod and Secret cached, plus ~100 MiB); an operator of a 10,000
// sandbox fleet sets controller.resources.limits.memory so
// (docs/install.md), as this does.
const ControllerMemory = "1536Mi"

// Configure shapes a cluster for the fleet: one node for the control
// plane (no sandbox runtime, no agent, no node lifecycle controller: the
// simulated Nodes have no kubelet), the API serving Namespace, and the
// controller's memory limit and extra flags (SANDLOT_SCALE_CONTROLLER_ARGS,
// e.g. --sandbox-workers=64 or --pprof-bind-address=:6065, then
// `go tool pprof http://<controller pod IP>:6065/debug/pprof/profile`).
// Everything else is the chart's defaults.
func Configure(o *cluster.Options) {
	o.Nodes, o.Fleet, o.Teams = 1, true, []string{Namespace}
	args := []any{}
	for _, a := range strings.Fields(os.Getenv("SANDLOT_SCALE_CONTROLLER_ARGS")) {
		args = append(args, a) // the chart's schema takes JSON arrays
	}
	o.Values = map[string]any{"controller": map[string]any{"extraArgs": args,
		"resources": map[string]any{"limits": map[string]any{"memory": ControllerMemory}}}}
}

// NewEnv connects to a cluster Configure shaped and issues an API key for
// Namespace, as an admin does.
func NewEnv(ctx context.Context, c *cluster.Cluster) (*Env, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 500, 1000 // the bench's own creates at 100/s and its reads
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := sandlotv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	e := &Env{Cluster: c, Config: cfg, Scheme: scheme, Admin: admin}
	if e.APIURL, err = c.APIURL(ctx); err != nil {
		return nil, err
	}
	if e.APIKey, err = c.IssueAPIKey(ctx, "--team="+Namespace, "--name=scale"); err != nil {
		return nil, err
	}
	return e, nil
}

// componentPID is the host PID of a sandlot component's process (its
// container's argv[0], /<name>): exactly one must run.
func componentPID(name string) (int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	var pids []int
	for _, d := range dirs {
		raw, err := os.ReadFile(d)
		if err != nil {
			continue // gone meanwhile
		}
		argv0, _, _ := strings.Cut(string(raw), "\x00")
		if argv0 == "/"+name {
			var pid int
			if _, err := fmt.Sscanf(d, "/proc/%d/cmdline", &pid); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("%d processes of %s on this host (%v), want the one of its pod", len(pids), name, pids)
	}
	return pids[0], nil
}

// restarts are the restarts of the release's controller and API
// containers (an OOM kill under the fleet's load shows here).
func (e *Env) restarts(ctx context.Context) (map[string]int32, error) {
	pods := &corev1.PodList{}
	if err := e.Admin.List(ctx, pods, client.InNamespace(cluster.ReleaseNamespace)); err != nil {
		return nil, fmt.Errorf("list the release's pods: %w", err)
	}
	out := map[string]int32{}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				out[p.Name+"/"+s.Name] = s.RestartCount
			}
		}
	}
	return out, nil
}
