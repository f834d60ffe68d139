package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// maxMetricsSandboxes bounds GET /sandboxes/metrics: one envd call each.
const maxMetricsSandboxes = 100

// envdMetrics is one sample of envd's GET /metrics and /metrics/history.
type envdMetrics struct {
	TS         int64   `json:"ts"`
	CPUCount   int32   `json:"cpu_count"`
	CPUUsedPct float64 `json:"cpu_used_pct"`
	MemTotal   int64   `json:"mem_total"`
	MemUsed    int64   `json:"mem_used"`
	MemCache   int64   `json:"mem_cache"`
	DiskUsed   int64   `json:"disk_used"`
	DiskTotal  int64   `json:"disk_total"`
}

func (m envdMetrics) json() metricJSON {
	return metricJSON{Timestamp: time.Unix(m.TS, 0).UTC().Format(time.RFC3339), TimestampUnix: m.TS,
		CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache,
		DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal}
}

// metrics is the sandbox's resource use over its life, or between start
// and end (unix seconds): the series its guest keeps (sampled every few
// seconds, moving with it through pauses and nodes), read from its envd as
// E2B's orchestrator reads envd. A paused sandbox answers none.
func (s *Server) metrics(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	q := url.Values{}
	for _, name := range []string{"start", "end"} {
		if v := r.URL.Query().Get(name); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				return 0, nil, errorf(http.StatusBadRequest, "%s must be a unix time in seconds, got %q", name, v)
			}
			q.Set(name, v)
		}
	}
	sbx, aerr := s.sandbox(r.Context(), r.PathValue("id"), false)
	if aerr != nil {
		return 0, nil, aerr
	}
	out := []metricJSON{}
	if paused(sbx) || sbx.Status.PodIP == "" {
		return http.StatusOK, out, nil
	}
	var series []envdMetrics
	if err := s.envdGet(r.Context(), sbx, "/metrics/history?"+q.Encode(), &series); err != nil {
		return 0, nil, errorf(http.StatusBadGateway, "metrics of sandbox %s: %v", r.PathValue("id"), err)
	}
	for _, m := range series {
		out = append(out, m.json())
	}
	return http.StatusOK, out, nil
}

// sandboxesMetrics is the latest sample of each named running sandbox
// (GET /sandboxes/metrics?sandbox_ids=a,b); unknown and paused ones are
// left out, as E2B leaves out what it has no metrics for.
func (s *Server) sandboxesMetrics(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 || len(ids) > maxMetricsSandboxes {
		return 0, nil, errorf(http.StatusBadRequest, "sandbox_ids must name 1 to %d sandboxes, got %d", maxMetricsSandboxes, len(ids))
	}
	out := map[string]metricJSON{}
	for _, id := range ids {
		sbx, aerr := s.sandbox(r.Context(), id, false)
		if aerr != nil && aerr.Code != http.StatusNotFound {
			return 0, nil, aerr
		}
		if aerr != nil || paused(sbx) || sbx.Status.PodIP == "" {
			continue
		}
		var m envdMetrics
		if err := s.envdGet(r.Context(), sbx, "/metrics", &m); err != nil {
			return 0, nil, errorf(http.StatusBadGateway, "metrics of sandbox %s: %v", id, err)
		}
		out[id] = m.json()
	}
	return http.StatusOK, map[string]any{"sandboxes": out}, nil
}

// envdGet reads a JSON route of the sandbox's envd with its access token.
func (s *Server) envdGet(ctx context.Context, sbx *sandlotv1.Sandbox, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := "http://" + net.JoinHostPort(sbx.Status.PodIP, strconv.Itoa(sandlotv1.EnvdPort)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Access-Token", s.token(ctx, sbx))
	resp, err := s.proxy.rp.Transport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("envd answered %s", resp.Status)
	}
	return decodeBounded(resp.Body, maxEnvdJSON, path, out)
}

// envdHealthy asks the sandbox's envd for /health (it answers 204 while
// it serves), within a few seconds.
func (s *Server) envdHealthy(ctx context.Context, sbx *sandlotv1.Sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	u := "http://" + net.JoinHostPort(sbx.Status.PodIP, strconv.Itoa(sandlotv1.EnvdPort)) + "/health"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.proxy.rp.Transport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("envd answered %s", resp.Status)
	}
	return nil
}

// maxEnvdJSON bounds what sandlot-api reads of a guest's JSON answer: the
// guest may lie, and an endless body would grow the API (every team's)
// until it is OOM-killed. A real /metrics/history of a day's samples is
// well under it.
const maxEnvdJSON = 4 << 20

// decodeBounded decodes one JSON value of at most limit bytes from r into
// out; a longer answer is an error naming what, not read further.
func decodeBounded(r io.Reader, limit int64, what string, out any) error {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	if err := json.NewDecoder(lr).Decode(out); err != nil {
		if lr.N <= 0 {
			return fmt.Errorf("envd's %s answered more than %d bytes", what, limit)
		}
		return fmt.Errorf("decode envd's %s: %w", what, err)
	}
	return nil
}
