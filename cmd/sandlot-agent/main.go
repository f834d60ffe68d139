// Command sandlot-agent is sandlot's node agent: the node-side work for
// Snapshots assigned to its node and VMReady on its sandboxes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

func main() {
	if err := run(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "sandlot-agent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	var metricsAddr, probeAddr, storeKind, storeDir string
	var node nodeagent.Node
	flag.StringVar(&node.Name, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	flag.StringVar(&node.SandlotRoot, "sandlot-root", "/run/sandlot", "the shims' <root> (the runtime option in containerd's config)")
	flag.StringVar(&storeKind, "store", "local", "snapshot store backend: local")
	flag.StringVar(&storeDir, "store-dir", "/var/lib/sandlot/store", "the store's directory on this node")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "address of the metrics endpoint (0 disables it)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8082", "address of /healthz and /readyz")
	logOpts := zap.Options{}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	if node.Name == "" {
		return fmt.Errorf("--node-name (or $NODE_NAME) is required")
	}
	if storeKind != "local" {
		return fmt.Errorf("--store %q: only local is available in this build", storeKind)
	}
	st, err := store.NewLocal(storeDir)
	if err != nil {
		return err
	}
	node.Store = st
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, sandlotv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: nodeagent.CacheOptions(node.Name),
		Metrics: metricsserver.Options{BindAddress: metricsAddr}, HealthProbeBindAddress: probeAddr})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := nodeagent.Setup(mgr, node); err != nil {
		return err
	}
	fp, err := nodeagent.Fingerprint("")
	if err != nil {
		return err
	}
	// The manager's client is not readable before Start: a direct client.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := nodeagent.PublishFingerprint(ctx, direct, node.Name, fp); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
