package envd

import (
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

func TestParseCPUStat(t *testing.T) {
	cases := []struct {
		name, in string
		want     cpuTimes
		err      string
	}{
		{"full line, guest not double counted",
			"cpu  100 5 50 800 20 3 2 10 40 4\ncpu0 50 2 25 400 10 1 1 5 20 2\n",
			cpuTimes{idle: 820, total: 990}, ""},
		{"old kernel with four fields", "cpu 10 0 10 80\n", cpuTimes{idle: 80, total: 100}, ""},
		{"aggregate line found after others", "intr 1 2 3\ncpu 1 1 1 7 0 0 0 0\n", cpuTimes{idle: 7, total: 10}, ""},
		{"per-cpu line is not the aggregate", "cpu0 1 2 3 4\n", cpuTimes{}, "no cpu line"},
		{"empty", "", cpuTimes{}, "no cpu line"},
		{"too few fields", "cpu 1 2 3\n", cpuTimes{}, "at least 4"},
		{"not a number", "cpu 1 x 3 4\n", cpuTimes{}, "invalid syntax"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCPUStat(strings.NewReader(tc.in))
			if !matchErr(err, tc.err) || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v, error containing %q", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestCPUPercent(t *testing.T) {
	cases := []struct {
		name      string
		prev, cur cpuTimes
		want      float64
	}{
		{"half busy", cpuTimes{idle: 100, total: 200}, cpuTimes{idle: 150, total: 300}, 50},
		{"all idle", cpuTimes{idle: 0, total: 0}, cpuTimes{idle: 40, total: 40}, 0},
		{"all busy", cpuTimes{idle: 10, total: 10}, cpuTimes{idle: 10, total: 70}, 100},
		{"rounded to two decimals", cpuTimes{}, cpuTimes{idle: 2, total: 3}, 33.33},
		{"no ticks elapsed", cpuTimes{idle: 5, total: 9}, cpuTimes{idle: 5, total: 9}, 0},
		{"idle going backwards is clamped", cpuTimes{idle: 50, total: 100}, cpuTimes{idle: 40, total: 200}, 100},
	}
	for _, tc := range cases {
		if got := cpuPercent(tc.prev, tc.cur); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	const full = "MemTotal:        2048 kB\nMemFree:          512 kB\nMemAvailable:    1536 kB\n" +
		"Buffers:           64 kB\nCached:           768 kB\nSwapCached:         0 kB\n"
	cases := []struct {
		name, in string
		want     memInfo
		used     uint64
		err      string
	}{
		{"kB are KiB, SwapCached is not Cached", full,
			memInfo{total: 2048 << 10, available: 1536 << 10, cached: 768 << 10}, 512 << 10, ""},
		{"available above total does not wrap", "MemTotal: 1 kB\nMemAvailable: 2 kB\nCached: 0 kB\n",
			memInfo{total: 1 << 10, available: 2 << 10}, 0, ""},
		{"missing fields are named", "MemTotal: 1 kB\n", memInfo{}, 0, "missing Cached: MemAvailable:"},
		{"empty", "", memInfo{}, 0, "missing"},
		{"not a number", "MemTotal: lots kB\n", memInfo{}, 0, "MemTotal:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMeminfo(strings.NewReader(tc.in))
			if !matchErr(err, tc.err) || got != tc.want || got.used() != tc.used {
				t.Fatalf("got %+v used %d, %v; want %+v used %d, error containing %q",
					got, got.used(), err, tc.want, tc.used, tc.err)
			}
		})
	}
}

// matchErr: no error wanted and none got, or the error contains want.
func matchErr(err error, want string) bool {
	if err == nil || want == "" {
		return err == nil && want == ""
	}
	return strings.Contains(err.Error(), want)
}

// TestMetricsRoute reads the test machine's real /proc and root
// filesystem through the guarded route.
func TestMetricsRoute(t *testing.T) {
	srv := newTestServer(t, "s3cret")
	get := func(token string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	for _, token := range []string{"", "nope"} {
		if resp, body := get(token); resp.StatusCode != 401 || !strings.Contains(string(body), "X-Access-Token") {
			t.Fatalf("token %q: got %d %s, want 401", token, resp.StatusCode, body)
		}
	}
	// The second call takes its CPU delta from the first one's sample.
	for range 2 {
		resp, body := get("s3cret")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("got %d %s", resp.StatusCode, body)
		}
		checkMetrics(t, body)
		t.Logf("%s", body)
	}
}

func checkMetrics(t *testing.T, body []byte) {
	t.Helper()
	var m Metrics
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	ok := m.Ts > 0 && m.CPUCount == runtime.NumCPU() && m.CPUUsedPct >= 0 && m.CPUUsedPct <= 100 &&
		m.MemTotal > 0 && m.MemUsed <= m.MemTotal && m.MemCache <= m.MemTotal &&
		m.MemTotalMiB == m.MemTotal>>20 && m.MemUsedMiB == m.MemUsed>>20 &&
		m.DiskTotal > 0 && m.DiskUsed <= m.DiskTotal
	if !ok {
		t.Fatalf("implausible metrics %s", body)
	}
	var raw map[string]any
	_ = json.Unmarshal(body, &raw)
	for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_cache",
		"mem_total_mib", "mem_used_mib", "disk_used", "disk_total"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("missing %q in %s", k, body)
		}
	}
}
