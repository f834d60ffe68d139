package scale

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// c is this package's cluster: sandlot installed by its chart (Configure).
var c *cluster.Cluster

func TestMain(m *testing.M) {
	sbxtest.Main(m, "scale", &c, func(_ crienv.T, _ string, o *cluster.Options) { Configure(o) })
}

// TestFleet is bench-scale shortened: 1,000 sandboxes over 100 simulated
// nodes at 100 creates/s, then churn with pauses and snapshots, against
// sandlot-controller and sandlot-api as the chart installs them (their
// Deployment pods, accounts, RBAC, policies and limits), each node's
// agent work coming from the real agent's cache options. No sandbox is
// lost (each gets a pod and runs), no pod serves two, the API lists every
// live one, no component restarts, and Sandbox writes do not fan out to
// every node.
func TestFleet(t *testing.T) {
	ctrllog.SetLogger(logr.Discard()) // the simulation's caches: their retries are expected
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e, err := NewEnv(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Nodes: 100, Sandboxes: 1000, Rate: 100, PodDelay: 50 * time.Millisecond, Steady: 5 * time.Second,
		PauseShare: 0.05, SnapshotShare: 0.01, Log: os.Stdout}
	rep, err := Run(ctx, e, o)
	if rep != nil {
		rep.Print(os.Stdout)
	}
	if err != nil {
		t.Fatalf("%v (the cluster's logs in %s with SANDLOT_E2E_KEEP=1)", err, c.Dir)
	}
	want := map[string]int{"ramp": 1000, "steady": 500}
	for _, p := range rep.Phases {
		// Each node's agent watches only its node's Sandboxes: a handful of
		// watchers per write (controller, API, the bench, one agent), not
		// one per node (~500 per create at 100 nodes).
		if n := p.WatchEventsPerCreate("sandboxes"); n == 0 || n > 60 {
			t.Errorf("%s: %.1f Sandbox watch events per create, want 1-60: the agents' caches are not scoped to their node", p.Name, n)
		}
		if p.Creates != want[p.Name] || p.NoPod != 0 || p.NotRunning != 0 || len(p.ToPod) != p.Creates || len(p.ToRunning) != p.Creates {
			t.Errorf("%s: %d creates (want %d), %d pods and %d Running seen; %d without a pod, %d not Running", p.Name, p.Creates,
				want[p.Name], len(p.ToPod), len(p.ToRunning), p.NoPod, p.NotRunning)
		}
	}
	if len(rep.Phases) != len(want) {
		t.Errorf("%d phases, want %d", len(rep.Phases), len(want))
	}
	if len(rep.SharedPods) > 0 {
		t.Errorf("pods that two sandboxes were placed in: %v", rep.SharedPods)
	}
	if rep.Live != 1000 || rep.Listed != rep.Live {
		t.Errorf("%d live sandboxes, the API listed %d: want 1000 both", rep.Live, rep.Listed)
	}
	if rep.Paused == 0 || rep.Snapshots == 0 {
		t.Errorf("the churn paused %d and snapshotted %d sandboxes: want some of each", rep.Paused, rep.Snapshots)
	}
}
