package metrics

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Sources of a sandbox start, the create histogram's label.
const (
	StartPool     = "pool"     // claimed a warm pool pod
	StartSlot     = "slot"     // claimed a start slot, its data restored into it
	StartTemplate = "template" // restored its template's base snapshot
	StartSnapshot = "snapshot" // restored a Snapshot (a clone, a fork)
	StartCold     = "cold"     // booted cold (a template's base builder)
)

// The controller's metrics, on controller-runtime's registry (served on
// --metrics-bind-address).
var (
	createSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandlot_sandbox_create_seconds",
		Help:    "From a Sandbox's creation until it first runs, by source (pool, slot, template, snapshot, cold).",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12), // 50 ms .. ~100 s
	}, []string{"source"})
	resumeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sandlot_sandbox_resume_seconds",
		Help:    "From a resume (spec.paused false) until the Sandbox runs again.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	})
	PoolClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_pool_claims_total",
		Help: "Starts of a template's sandboxes by outcome: hit (claimed a warm pool pod), slot (claimed a start slot) or miss (no pool pod was free).",
	}, []string{"template", "result"})
	createFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_sandbox_create_failures_total",
		Help: "Sandboxes that failed before they first ran, by source and reason (the Sandbox's status reason: PodFailed, PodLost, SourceFailed, ...; Other for any other).",
	}, []string{"source", "reason"})
	buildFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_template_build_failures_total",
		Help: "Failed attempts at a template's base build on a node, by reason: ImageMissing and BuilderLost are retried with backoff; BuildFailed, ProbeTimeout and InvalidImage are final until the spec changes.",
	}, []string{"reason"})
)

// state is the registered stateCollector; ReadStateFrom points it at
// the manager's cache.
var state = &stateCollector{}

// ReadStateFrom points the state metrics at a reader (the manager's cache).
func ReadStateFrom(r client.Reader) { state.reader.Store(&r) }

func init() {
	metrics.Registry.MustRegister(createSeconds, resumeSeconds, PoolClaims, createFailures, buildFailures, state)
}

// startObserved is what a status change says about a start: which
// histogram (create or resume), the source and the time it took; ok
// false when the change is no start. A create is the sandbox's first run
// (no startedAt before); a resume, the first run of a pod started after
// the last resume. Nothing else counts — a rollback's flap, a restarted
// controller seeing a Running sandbox — so each is counted once.
func startObserved(old, cur *sandlotv1.Sandbox, now time.Time) (resume bool, source string, took time.Duration, ok bool) {
	if old.Status.Phase == sandlotv1.SandboxRunning || cur.Status.Phase != sandlotv1.SandboxRunning {
		return false, "", 0, false
	}
	resumed, started := cur.Status.LastResumedAt, old.Status.StartedAt
	switch {
	case started == nil:
		return false, startSource(cur), now.Sub(cur.CreationTimestamp.Time), true
	case resumed != nil && started.Before(resumed):
		return true, "", now.Sub(resumed.Time), true
	}
	return false, "", 0, false
}

// startSource names how a sandbox started.
func startSource(sbx *sandlotv1.Sandbox) string {
	switch c := meta.FindStatusCondition(sbx.Status.Conditions, sandlotv1.ConditionScheduled); {
	case sbx.Annotations[sandlotv1.AnnotationBaseOf] != "":
		return StartCold
	case c != nil && c.Reason == sandlotv1.ReasonClaimedFromPool:
		return StartPool
	case c != nil && c.Reason == sandlotv1.ReasonClaimedStartSlot:
		return StartSlot
	case sbx.Spec.Source.Snapshot != "":
		return StartSnapshot
	}
	return StartTemplate
}

// ObserveStart records a status change that is a start, once: a
// reconcile of a cached copy that lags the controller's own write sees
// the same change again.
func ObserveStart(old, cur *sandlotv1.Sandbox, now time.Time) {
	resume, source, took, ok := startObserved(old, cur, now)
	if !ok || !counted.first(cur, resume) {
		return
	}
	if resume {
		resumeSeconds.Observe(took.Seconds())
	} else {
		createSeconds.WithLabelValues(source).Observe(took.Seconds())
	}
}

// startsSeen remembers, per sandbox, the last start counted: "create" or
// the resume's time. forget drops a sandbox once it is gone.
type startsSeen struct {
	mu   sync.Mutex
	last map[types.UID]string
}

var counted = &startsSeen{last: map[types.UID]string{}}

// ForgetSandbox drops what was counted of a sandbox that is gone.
func ForgetSandbox(uid types.UID) { counted.forget(uid) }

func (s *startsSeen) first(sbx *sandlotv1.Sandbox, resume bool) bool {
	key := "create"
	if resume {
		key = sbx.Status.LastResumedAt.UTC().Format(time.RFC3339Nano)
	}
	return s.mark(sbx.UID, key)
}

// mark records key as uid's last event counted; false when it was already.
func (s *startsSeen) mark(uid types.UID, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last[uid] == key {
		return false
	}
	s.last[uid] = key
	return true
}

func (s *startsSeen) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, uid)
}

// stateCollector reports, at each scrape, sandboxes by phase, warm pool
// pods by template, node and state, and the runtime nodes
// (nodes.go), from the controller's cache.
type stateCollector struct {
	reader atomic.Pointer[client.Reader]
}

var (
	sandboxesDesc = prometheus.NewDesc("sandlot_sandboxes", "Sandboxes by phase.", []string{"phase"}, nil)
	poolDesc      = prometheus.NewDesc("sandlot_pool_pods", "Unclaimed warm pool pods by template, node and state (ready, starting).",
		[]string{"namespace", "template", "node", "state"}, nil)
	poolTargetDesc = prometheus.NewDesc("sandlot_pool_target", "Warm pool pods a template wants on each node it is built on (spec.warmPool).",
		[]string{"namespace", "template"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, poolDesc, poolTargetDesc, nodeCapacityDesc, nodeRequestedDesc, nodeInfoDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	rp := c.reader.Load()
	if rp == nil {
		return
	}
	reader := *rp
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sandboxes := &sandlotv1.SandboxList{}
	if err := reader.List(ctx, sandboxes); err == nil {
		for phase, n := range countPhases(sandboxes.Items) {
			ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), string(phase))
		}
	}
	templates := &sandlotv1.TemplateList{}
	if err := reader.List(ctx, templates); err == nil {
		for _, tpl := range templates.Items {
			ch <- prometheus.MustNewConstMetric(poolTargetDesc, prometheus.GaugeValue, float64(tpl.Spec.WarmPool), tpl.Namespace, tpl.Name)
			for _, p := range tpl.Status.Pool {
				ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(p.Ready), tpl.Namespace, tpl.Name, p.Node, "ready")
				ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(p.Starting), tpl.Namespace, tpl.Name, p.Node, "starting")
			}
		}
	}
	collectNodes(ctx, reader, ch)
}

// countPhases counts sandboxes by phase, every phase present (0 too).
func countPhases(items []sandlotv1.Sandbox) map[sandlotv1.SandboxPhase]int {
	out := map[sandlotv1.SandboxPhase]int{}
	for _, p := range []sandlotv1.SandboxPhase{sandlotv1.SandboxPending, sandlotv1.SandboxStarting, sandlotv1.SandboxRunning,
		sandlotv1.SandboxPausing, sandlotv1.SandboxPaused, sandlotv1.SandboxResuming, sandlotv1.SandboxFailed, sandlotv1.SandboxTerminated} {
		out[p] = 0
	}
	for _, s := range items {
		if s.Status.Phase != "" {
			out[s.Status.Phase]++
		}
	}
	return out
}
