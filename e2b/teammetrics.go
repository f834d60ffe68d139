package e2b

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Team metrics (GET /teams/{teamID}/metrics and .../metrics/max): each
// team's concurrent sandboxes and start rate over time, sampled from the
// API's cache every teamSampleEvery and kept for teamSampleKeep. Kept in
// memory: a restarted sandlot-api starts its series anew (every replica
// samples the same cache, so replicas agree).
const (
	teamSampleEvery = 10 * time.Second
	teamSampleKeep  = 24 * time.Hour
	// defaultMetricsWindow is the interval asked when start is not given.
	defaultMetricsWindow = time.Hour
)

// teamSample is one sample of a team.
type teamSample struct {
	at         time.Time
	concurrent int32   // running sandboxes (paused ones are not)
	startRate  float32 // starts per second since the previous sample
}

// teamSeries holds every served team's samples, oldest first.
type teamSeries struct {
	mu   sync.Mutex
	last time.Time
	byNS map[string][]teamSample
}

// sample records one sample per namespace from list (the API's cache).
func (ts *teamSeries) sample(now time.Time, namespaces []string, list []sandlotv1.Sandbox) {
	running, starts := map[string]int32{}, map[string]int{}
	for i := range list {
		sbx := &list[i]
		if state(sbx) == "running" && !sbx.Status.Phase.Terminal() && sbx.DeletionTimestamp == nil {
			running[sbx.Namespace]++
		}
		if at := sbx.Status.StartedAt; at != nil && at.Time.After(ts.last) && !at.Time.After(now) {
			starts[sbx.Namespace]++
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	secs := now.Sub(ts.last).Seconds()
	if ts.last.IsZero() || secs <= 0 {
		secs = teamSampleEvery.Seconds()
	}
	for _, ns := range namespaces {
		s := append(ts.byNS[ns], teamSample{at: now, concurrent: running[ns], startRate: float32(float64(starts[ns]) / secs)})
		for len(s) > 0 && now.Sub(s[0].at) > teamSampleKeep {
			s = s[1:]
		}
		ts.byNS[ns] = s
	}
	ts.last = now
}

// between is a copy of ns's samples in [start, end].
func (ts *teamSeries) between(ns string, start, end time.Time) []teamSample {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []teamSample
	for _, s := range ts.byNS[ns] {
		if !s.at.Before(start) && !s.at.After(end) {
			out = append(out, s)
		}
	}
	return out
}

// SampleTeams samples every served team every teamSampleEvery until ctx
// ends (sandlot-api runs it beside the server).
func (s *Server) SampleTeams(ctx context.Context) {
	tick := time.NewTicker(teamSampleEvery)
	defer tick.Stop()
	for {
		list := &sandlotv1.SandboxList{}
		// Read only: counted, never kept or changed.
		if err := s.kube.List(ctx, list, client.UnsafeDisableDeepCopy); err == nil {
			s.teamSeries.sample(s.now(), s.cfg.Namespaces(), list.Items)
		} else if ctx.Err() == nil {
			s.cfg.Log.Error("team metrics: list sandboxes", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type teamMetricJSON struct {
	Timestamp           string  `json:"timestamp"`
	TimestampUnix       int64   `json:"timestampUnix"`
	ConcurrentSandboxes int32   `json:"concurrentSandboxes"`
	SandboxStartRate    float32 `json:"sandboxStartRate"`
}

type maxTeamMetricJSON struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	Value         float64 `json:"value"`
}

// teamMetrics answers GET /teams/{teamID}/metrics: the key's own team's
// samples in [start, end] (unix seconds; default the last hour).
func (s *Server) teamMetrics(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	start, end, err := s.metricsInterval(r)
	if err != nil {
		return 0, nil, err
	}
	out := []teamMetricJSON{}
	for _, m := range s.teamSeries.between(teamOf(r.Context()), start, end) {
		out = append(out, teamMetricJSON{Timestamp: m.at.UTC().Format(time.RFC3339), TimestampUnix: m.at.Unix(),
			ConcurrentSandboxes: m.concurrent, SandboxStartRate: m.startRate})
	}
	return http.StatusOK, out, nil
}

// teamMetricMax answers GET /teams/{teamID}/metrics/max?metric=: the
// greatest value in the interval and when it was (the first such sample;
// 0 at the interval's end when there is none).
func (s *Server) teamMetricMax(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	start, end, err := s.metricsInterval(r)
	if err != nil {
		return 0, nil, err
	}
	metric := r.URL.Query().Get("metric")
	value := map[string]func(teamSample) float64{
		"concurrent_sandboxes": func(m teamSample) float64 { return float64(m.concurrent) },
		"sandbox_start_rate":   func(m teamSample) float64 { return float64(m.startRate) },
	}[metric]
	if value == nil {
		return 0, nil, errorf(http.StatusBadRequest, "query \"metric\": %q is neither concurrent_sandboxes nor sandbox_start_rate", metric)
	}
	best := maxTeamMetricJSON{Timestamp: end.UTC().Format(time.RFC3339), TimestampUnix: end.Unix()}
	for i, m := range s.teamSeries.between(teamOf(r.Context()), start, end) {
		if v := value(m); i == 0 || v > best.Value {
			best = maxTeamMetricJSON{Timestamp: m.at.UTC().Format(time.RFC3339), TimestampUnix: m.at.Unix(), Value: v}
		}
	}
	return http.StatusOK, best, nil
}

// metricsInterval checks the path's team (only the key's own) and reads
// start and end (unix seconds).
func (s *Server) metricsInterval(r *http.Request) (time.Time, time.Time, *apiError) {
	if id := r.PathValue("teamID"); id != teamOf(r.Context()) {
		return time.Time{}, time.Time{}, errorf(http.StatusForbidden, "team %q is not this key's team", id)
	}
	end, err := unixQuery(r, "end", s.now())
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	start, err := unixQuery(r, "start", end.Add(-defaultMetricsWindow))
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	if start.After(end) {
		return time.Time{}, time.Time{}, errorf(http.StatusBadRequest, "query \"start\" is after \"end\"")
	}
	return start, end, nil
}

func unixQuery(r *http.Request, name string, def time.Time) (time.Time, *apiError) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, errorf(http.StatusBadRequest, "query %q: %q is not a unix time in seconds", name, v)
	}
	return time.Unix(n, 0), nil
}
