// Command scale benchmarks sandlot's control plane at fleet size:
// sandlot-controller and sandlot-api as the Helm chart installs them (their
// Deployment pods, accounts, RBAC, policies) on a one-node cluster
// (internal/cluster: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, a kubelet), and a simulated fleet (test/scale) of nodes,
// kubelet and node agent. It ramps to -sandboxes at -rate creates a
// second, churns, then lists them through the E2B API.
//
//	make bench-scale   (BENCH_ARGS="-nodes 100 -sandboxes 1000" for a short run)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/scale"
)

func main() {
	var o scale.Options
	flag.IntVar(&o.Nodes, "nodes", 1000, "simulated nodes")
	flag.IntVar(&o.Sandboxes, "sandboxes", 10000, "live sandboxes the ramp reaches")
	flag.Float64Var(&o.Rate, "rate", 100, "creates per second")
	flag.DurationVar(&o.PodDelay, "pod-delay", 50*time.Millisecond, "the simulated kubelet's pod start")
	pool := flag.Int("pool", 0, "warm pool per node (0: none)")
	slots := flag.Int("slots", 0, "start slots per node (0: none; each is a pod a start claims instead of creating one)")
	flag.DurationVar(&o.Steady, "steady", 30*time.Second, "churn at full size: a delete and a create per 1/rate")
	flag.Float64Var(&o.PauseShare, "pause", 0.05, "share of the churn's creates that also pause (and resume) a sandbox")
	flag.Float64Var(&o.SnapshotShare, "snapshot", 0.01, "share that also snapshot one")
	flag.DurationVar(&o.Wait, "wait", 20*time.Minute, "how long each phase waits for its sandboxes to run (10,000 at ~20 creates/s sustained take ~9 min on 2 cores)")
	caches := flag.String("agent-caches", string(scale.NodeCaches), "each node agent's watches: node (the real agent's cache options), "+
		"all (the same kinds unselected: every Sandbox to every agent, as before ecdfb3b), shared (no agent watches: one simulation cache)")
	flag.Parse()
	switch c := scale.AgentCaches(*caches); c {
	case scale.NodeCaches, scale.AllCaches, scale.SharedCache:
		o.AgentCaches = c
	default:
		fmt.Fprintf(os.Stderr, "bench-scale: -agent-caches %q: want node, all or shared\n", *caches)
		os.Exit(2)
	}
	ctrllog.SetLogger(logr.Discard()) // the simulation's caches: their retries are expected
	o.WarmPool, o.Slots, o.Log = int32(*pool), int32(*slots), os.Stdout
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

func run(o scale.Options) error {
	var rep *scale.Report
	err := crienv.Run("bench-scale", func(t crienv.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour+4*o.Wait)
		defer cancel()
		fmt.Printf("# sandlot control plane at fleet size, installed by its chart on a one-node cluster (Kubernetes v1.37.2, "+
			"etcd v3.6.16); no VM: accel n/a; host %s\n", host.Describe())
		c, _ := sbxbench.StartCluster(t, 1, func(_ string, co *cluster.Options) { scale.Configure(co) })
		e, err := scale.NewEnv(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		rep, err = scale.Run(ctx, e, o)
		if rep != nil {
			rep.Print(os.Stdout)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	return err
}
