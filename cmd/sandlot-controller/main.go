// Command sandlot-controller runs sandlot's reconcilers: Sandbox,
// Template, Snapshot and PausedSandbox.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/cmd/internal/metricsflag"
	"github.com/sandlot-dev/sandlot/controllers"
	"github.com/sandlot-dev/sandlot/internal/version"
)

func main() {
	if version.Requested(os.Args[1:]) {
		version.Print(os.Stdout, "sandlot-controller")
		return
	}
	if err := run(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "sandlot-controller:", err)
		os.Exit(1)
	}
}

// flags are the controller's command line.
type flags struct {
	probeAddr, pprofAddr, leaderNamespace string
	leaderElect                           bool
	metrics                               *metricsflag.Flags
	opts                                  controllers.Options
}

func run(ctx context.Context) error {
	f, err := parseFlags()
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   controllers.CacheOptions(),
		Metrics:                 f.metrics.Options(),
		HealthProbeBindAddress:  f.probeAddr,
		PprofBindAddress:        f.pprofAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "sandlot-controller.sandlot.dev",
		LeaderElectionNamespace: f.leaderNamespace,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := controllers.SetupAll(mgr, f.opts); err != nil {
		return fmt.Errorf("set up reconcilers: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// parseFlags reads the command line and checks it.
func parseFlags() (*flags, error) {
	f := &flags{}
	opts := &f.opts
	f.metrics = metricsflag.Bind(flag.CommandLine, ":8080")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&f.pprofAddr, "pprof-bind-address", "", "address of Go's /debug/pprof (empty: none; for profiling, never exposed by the chart)")
	flag.BoolVar(&f.leaderElect, "leader-elect", false, "elect a leader, so that replicas can stand by")
	flag.StringVar(&f.leaderNamespace, "leader-election-namespace", "", "namespace of the leader lease (defaults to the pod's)")
	flag.IntVar(&opts.SandboxWorkers, "sandbox-workers", controllers.DefaultSandboxWorkers, "Sandboxes reconciled concurrently")
	flag.DurationVar(&opts.SnapshotExpiry, "snapshot-expiry", 0, "delete Snapshots without their own expiry this long after creation (0: never)")
	flag.DurationVar(&opts.PausedExpiry, "paused-expiry", 0, "delete pause packages this long after creation (0: never)")
	flag.IntVar(&opts.SlotsPerNode, "slots-per-node", 0, "start slots (pods with no VM that starts restore into) each node keeps per template whose spec.slots is unset (0: none)")
	pullPolicy := flag.String("image-pull-policy", string(corev1.PullIfNotPresent), "pull policy of every sandbox pod: "+
		"IfNotPresent, Always (each start checks the pod's pull Secrets with the registry) or Never (only images imported on the nodes)")
	flag.BoolVar(&opts.SharedStore, "shared-store", false, "the node agents' store is shared (s3, juicefs): a drain moves each sandbox (pause, resume on another node); "+
		"false: a drain waits for the sandboxes to end")
	cpuPerVCPU := flag.String("cpu-per-vcpu", "1", "CPU a sandbox pod requests per vCPU (e.g. 250m overcommits the nodes' CPUs 4:1)")
	logOpts := zap.Options{}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	opts.ImagePullPolicy = corev1.PullPolicy(*pullPolicy)
	return f, checkOptions(opts, *cpuPerVCPU)
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, nodev1.AddToScheme, policyv1.AddToScheme, sandlotv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return s, nil
}

// checkOptions refuses flags out of their bounds, by name, and sets the
// CPU request per vCPU from cpuPerVCPU.
func checkOptions(opts *controllers.Options, cpuPerVCPU string) error {
	q, err := resource.ParseQuantity(cpuPerVCPU)
	if err != nil || q.MilliValue() <= 0 {
		return fmt.Errorf("--cpu-per-vcpu %q: want a positive CPU quantity such as 1 or 250m", cpuPerVCPU)
	}
	opts.MilliCPUPerVCPU = q.MilliValue()
	switch opts.ImagePullPolicy {
	case corev1.PullIfNotPresent, corev1.PullAlways, corev1.PullNever:
	default:
		return fmt.Errorf("--image-pull-policy %q: want IfNotPresent, Always or Never", opts.ImagePullPolicy)
	}
	if opts.SlotsPerNode < 0 || opts.SlotsPerNode > sandlotv1.MaxSlotsPerNode {
		return fmt.Errorf("--slots-per-node %d: want 0 to %d (a template's spec.slots bounds)", opts.SlotsPerNode, sandlotv1.MaxSlotsPerNode)
	}
	return nil
}
