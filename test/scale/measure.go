package scale

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// counters are Prometheus samples by name and label values.
type counters map[string]float64

// apiMetrics scrapes the API server's /metrics: requests by verb and
// resource, watch events by kind, objects stored by resource.
func (e *Env) apiMetrics(ctx context.Context) (counters, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return nil, err
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("API server metrics: %w", err)
	}
	return parseMetrics(raw, map[string][]string{
		"apiserver_request_total":      {"verb", "resource", "subresource", "code"},
		"apiserver_watch_events_total": {"resource"},
		"apiserver_storage_objects":    {"resource"},
		"apiserver_resource_objects":   {"resource"}, // its name from Kubernetes v1.34 on
	})
}

// etcdMetrics scrapes etcd: the database's size in use and its keys.
func (e *Env) etcdMetrics(ctx context.Context) (counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Cluster.EtcdMetricsURL(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("etcd metrics: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseMetrics(raw, map[string][]string{"etcd_mvcc_db_total_size_in_use_in_bytes": {}, "etcd_debugging_mvcc_keys_total": {}})
}

// parseMetrics sums each wanted family's samples by the given labels
// (key: name{v1,v2,...}).
func parseMetrics(raw []byte, want map[string][]string) (counters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := counters{}
	for name, labels := range want {
		fam, ok := fams[name]
		if !ok {
			continue
		}
		for _, m := range fam.GetMetric() {
			out[name+"{"+labelValues(m, labels)+"}"] += value(m)
		}
	}
	return out, nil
}

func labelValues(m *dto.Metric, names []string) string {
	vals := make([]string, len(names))
	for i, n := range names {
		for _, l := range m.GetLabel() {
			if l.GetName() == n {
				vals[i] = l.GetValue()
			}
		}
	}
	return strings.Join(vals, ",")
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// delta is after - before for the keys of prefix, largest first.
func delta(before, after counters, prefix string) []kv {
	var out []kv
	for k, v := range after {
		if strings.HasPrefix(k, prefix) && v-before[k] > 0 {
			out = append(out, kv{strings.TrimPrefix(k, prefix), v - before[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].v > out[j].v })
	return out
}

type kv struct {
	k string
	v float64
}

// procStats is a process's CPU time so far and its resident and peak
// resident memory.
type procStats struct {
	CPU       time.Duration
	RSS, Peak int64 // bytes
}

func readProc(pid int) (procStats, error) {
	var st procStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th (clock ticks of 10 ms).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return st, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	kt, _ := strconv.ParseInt(f[12], 10, 64)
	st.CPU = time.Duration(ut+kt) * 10 * time.Millisecond
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			st.RSS = kb << 10
		case "VmHWM:":
			st.Peak = kb << 10
		}
	}
	return st, nil
}
