package scale

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// Options shape a run.
type Options struct {
	Nodes     int           // simulated nodes
	Sandboxes int           // live sandboxes the ramp reaches
	Rate      float64       // creates per second
	PodDelay  time.Duration // the simulated kubelet's pod start
	WarmPool  int32         // the template's warm pool per node (0: none)
	Slots     int32         // the template's start slots per node (0: none)
	// Steady is how long the churn runs at Sandboxes live after the ramp:
	// a delete and a create per 1/Rate, PauseShare of the creates also
	// pause a sandbox (resumed once Paused), SnapshotShare snapshot one.
	Steady                    time.Duration
	PauseShare, SnapshotShare float64
	// Wait bounds each phase's wait for its sandboxes to run, and the
	// settle after the churn (0: 5 minutes).
	Wait time.Duration
	// AgentCaches is what each node's agent watches ("": NodeCaches).
	AgentCaches AgentCaches
	Log         io.Writer
}

// wait is how long a phase waits for its sandboxes.
func (o Options) wait() time.Duration {
	if o.Wait > 0 {
		return o.Wait
	}
	return 5 * time.Minute
}

// run is one run's state.
type run struct {
	o       Options
	e       *Env
	fleet   *Fleet // its cache serves the run's own reads
	rec     *recorder
	mu      sync.Mutex
	live    []string // sandboxes created and not deleted, oldest first
	deleted map[string]bool
	next    int
}

// template is the workload's one Template.
const template = "py"

// Run drives e: the fleet, the template's bases (and pools), the ramp,
// the churn, the API's lists; it returns what it measured.
func Run(ctx context.Context, e *Env, o Options) (*Report, error) {
	r := &run{o: o, e: e, deleted: map[string]bool{}}
	rep := &Report{Options: o}
	f := &Fleet{Nodes: o.Nodes, PodDelay: o.PodDelay, AgentCaches: o.AgentCaches}
	if err := f.AddNodes(ctx, e.Admin); err != nil {
		return nil, err
	}
	if err := f.Start(ctx, e.Config, e.Scheme); err != nil {
		return nil, err
	}
	r.fleet = f
	if err := r.agentsReady(ctx); err != nil {
		return nil, err
	}
	var err error
	if r.rec, err = newRecorder(ctx, e.Config, e.Scheme); err != nil {
		return nil, err
	}
	if rep.Bases, err = r.bases(ctx); err != nil {
		return nil, err
	}
	for _, p := range []func(context.Context, *Report) error{r.ramp, r.steady, r.settle, r.listAll, r.finish} {
		if err := p(ctx, rep); err != nil {
			return rep, err
		}
	}
	// The pods' limits are the chart's (and Configure's): a component
	// killed for its memory under the load restarted meanwhile.
	restarted, err := e.restarts(ctx)
	if err == nil && len(restarted) > 0 {
		err = fmt.Errorf("containers of the release restarted during the run: %v", restarted)
	}
	return rep, err
}

// agentsReady waits until the chart's agent DaemonSet has a Ready pod on
// every simulated node (the fleet's kubelet runs them), before anything
// is measured.
func (r *run) agentsReady(ctx context.Context) error {
	began := time.Now()
	err := poll.Within(r.o.wait(), "the agent DaemonSet Ready on every node", func() error {
		ds := &appsv1.DaemonSet{}
		if err := r.e.Admin.Get(ctx, client.ObjectKey{Namespace: cluster.ReleaseNamespace, Name: "sandlot-agent"}, ds); err != nil {
			return err
		}
		if st := ds.Status; st.DesiredNumberScheduled != int32(r.o.Nodes) || st.NumberReady != st.DesiredNumberScheduled {
			return fmt.Errorf("%d of %d agent pods Ready (%d nodes)", st.NumberReady, st.DesiredNumberScheduled, r.o.Nodes)
		}
		return nil
	})
	fmt.Fprintf(r.o.Log, "# the agent DaemonSet: a Ready pod on each of %d nodes in %v\n", r.o.Nodes, time.Since(began).Round(time.Millisecond))
	return err
}

// bases creates the template and waits until its base (and pool) is
// Ready on every node.
func (r *run) bases(ctx context.Context) (time.Duration, error) {
	began := time.Now()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: template, Namespace: Namespace},
		Spec: sandlotv1.TemplateSpec{Image: "python:3.12", Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}, WarmPool: r.o.WarmPool,
			Slots: &r.o.Slots}}
	if err := r.e.Admin.Create(ctx, tpl); err != nil {
		return 0, err
	}
	err := poll.Within(10*time.Minute, fmt.Sprintf("base snapshots (and pools) of %s on %d nodes", template, r.o.Nodes), func() error {
		got := &sandlotv1.Template{}
		if err := r.e.Admin.Get(ctx, client.ObjectKeyFromObject(tpl), got); err != nil {
			return err
		}
		ready, pooled := 0, 0
		for _, b := range got.Status.BaseSnapshots {
			if b.Phase == sandlotv1.BaseReady && b.Revision == got.Status.BaseRevision {
				ready++
			}
		}
		for _, p := range got.Status.Pool {
			if p.Ready >= r.o.WarmPool {
				pooled++
			}
		}
		if ready < r.o.Nodes || (r.o.WarmPool > 0 && pooled < r.o.Nodes) {
			return fmt.Errorf("%d bases Ready, %d pools full", ready, pooled)
		}
		return nil
	})
	fmt.Fprintf(r.o.Log, "# template %s: bases%s Ready on %d nodes in %v\n", template, map[bool]string{true: " and pools"}[r.o.WarmPool > 0],
		r.o.Nodes, time.Since(began).Round(time.Millisecond))
	return time.Since(began), err
}

// create creates the next sandbox of the template.
func (r *run) create(ctx context.Context) error {
	r.mu.Lock()
	name := fmt.Sprintf("s-%06d", r.next)
	r.next++
	r.mu.Unlock()
	// With the controller's finalizer, as sandlot-api and the plugin
	// create (a bare manifest costs the controller's PUT adding it).
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace,
		Finalizers: []string{sandlotv1.FinalizerSandboxVM}},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: template},
			// Outlives the run: the template's default (5 min) expired a
			// 10,000 ramp's sandboxes while the last still waited to run.
			TimeoutSeconds: ptr.To(int32(3 * 3600)),
			Metadata:       map[string]string{"user": fmt.Sprintf("u%d", rand.IntN(100))}}}
	r.rec.creating(name)
	if err := r.e.Admin.Create(ctx, sbx); err != nil {
		return fmt.Errorf("create sandbox %s: %w", name, err)
	}
	r.mu.Lock()
	r.live = append(r.live, name)
	r.mu.Unlock()
	return nil
}

// paced calls f n times at o.Rate per second, at most 64 at once, and
// returns the names created meanwhile and the wall time of the calls.
func (r *run) paced(ctx context.Context, n int, f func(context.Context) error) (time.Duration, error) {
	began := time.Now()
	sem := make(chan struct{}, 64)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		if d := time.Until(began.Add(time.Duration(float64(i) / r.o.Rate * float64(time.Second)))); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return time.Since(began), <-errs
}
