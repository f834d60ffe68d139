package envd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Metrics is envd's Metrics schema. Sizes are bytes, except the *_mib
// fields the schema also carries for older SDKs.
type Metrics struct {
	Ts          int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// firstCPUWindow is how long the first request samples /proc/stat over:
// with no earlier sample there is nothing to take a delta from.
const firstCPUWindow = 100 * time.Millisecond

// metricsSource answers /metrics. It keeps the previous /proc/stat sample
// because CPU usage only exists as a delta between two samples.
type metricsSource struct {
	mu     sync.Mutex
	prev   cpuTimes
	pct    float64
	seeded bool
}

func (m *metricsSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mt, err := m.collect()
	if err != nil {
		fail(w, r, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, mt)
}

func (m *metricsSource) collect() (Metrics, error) {
	pct, err := m.cpuUsed()
	if err != nil {
		return Metrics{}, err
	}
	mem, err := parseFile("/proc/meminfo", parseMeminfo)
	if err != nil {
		return Metrics{}, err
	}
	diskTotal, diskUsed, err := diskUsage("/")
	if err != nil {
		return Metrics{}, err
	}
	return Metrics{
		Ts: time.Now().Unix(), CPUCount: runtime.NumCPU(), CPUUsedPct: pct,
		MemTotal: mem.total, MemUsed: mem.used(), MemCache: mem.cached,
		MemTotalMiB: mem.total >> 20, MemUsedMiB: mem.used() >> 20,
		DiskUsed: diskUsed, DiskTotal: diskTotal,
	}, nil
}

// cpuUsed is the CPU usage since the previous call.
func (m *metricsSource) cpuUsed() (float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, err := parseFile("/proc/stat", parseCPUStat)
	if err != nil {
		return 0, err
	}
	if !m.seeded {
		m.prev, m.seeded = cur, true
		time.Sleep(firstCPUWindow)
		if cur, err = parseFile("/proc/stat", parseCPUStat); err != nil {
			return 0, err
		}
	}
	// Two calls within one clock tick see the same counters; answering
	// the last usage beats a made-up 0%, and keeping prev lets the next
	// call measure a real window.
	if cur.total > m.prev.total {
		m.pct, m.prev = cpuPercent(m.prev, cur), cur
	}
	return m.pct, nil
}

// parseFile opens path and hands it to parse.
func parseFile[T any](path string, parse func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	return parse(f)
}

// cpuTimes are the aggregate CPU counters of /proc/stat, in clock ticks.
type cpuTimes struct {
	idle, total uint64
}

// parseCPUStat reads the aggregate "cpu" line of /proc/stat.
func parseCPUStat(r io.Reader) (cpuTimes, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && fields[0] == "cpu" {
			return cpuTimesOf(fields[1:])
		}
	}
	if err := sc.Err(); err != nil {
		return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
	}
	return cpuTimes{}, errors.New("/proc/stat: no cpu line")
}

// cpuTimesOf sums user nice system idle iowait irq softirq steal. Guest
// and guest_nice are left out: the kernel already counts them in user and
// nice. Iowait is idle time, as top and gopsutil treat it.
func cpuTimesOf(fields []string) (cpuTimes, error) {
	if len(fields) < 4 {
		return cpuTimes{}, fmt.Errorf("/proc/stat: cpu line has %d fields, want at least 4", len(fields))
	}
	var t cpuTimes
	for i, f := range fields[:min(len(fields), 8)] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.total += v
		if i == 3 || i == 4 {
			t.idle += v
		}
	}
	return t, nil
}

// cpuPercent is the busy share of the ticks between two samples, rounded
// to two decimals: tick granularity makes further digits noise.
func cpuPercent(prev, cur cpuTimes) float64 {
	if cur.total <= prev.total {
		return 0
	}
	total := float64(cur.total - prev.total)
	idle := float64(cur.idle - min(prev.idle, cur.idle))
	busy := max(total-idle, 0)
	return math.Round(busy/total*100*100) / 100
}

// memInfo holds the /proc/meminfo fields /metrics reports, in bytes.
type memInfo struct {
	total, available, cached uint64
}

// used is what the kernel cannot hand out without swapping, the same
// figure free(1) shows as used.
func (m memInfo) used() uint64 {
	return m.total - min(m.available, m.total)
}

// parseMeminfo reads MemTotal, MemAvailable and Cached from /proc/meminfo.
func parseMeminfo(r io.Reader) (memInfo, error) {
	var m memInfo
	want := map[string]*uint64{"MemTotal:": &m.total, "MemAvailable:": &m.available, "Cached:": &m.cached}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || want[fields[0]] == nil {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return memInfo{}, fmt.Errorf("/proc/meminfo %s: %w", fields[0], err)
		}
		*want[fields[0]] = v * 1024 // meminfo's "kB" is KiB
		delete(want, fields[0])
	}
	if err := sc.Err(); err != nil {
		return memInfo{}, fmt.Errorf("/proc/meminfo: %w", err)
	}
	if len(want) > 0 {
		return memInfo{}, fmt.Errorf("/proc/meminfo: missing %s", strings.Join(slices.Sorted(maps.Keys(want)), " "))
	}
	return m, nil
}

// diskUsage is the size and used space of the filesystem holding path,
// counted as df(1) does (reserved blocks are used).
func diskUsage(path string) (total, used uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	// Blocks are counted in fragment units; Linux sets Frsize to Bsize
	// for filesystems without fragments.
	size := uint64(st.Frsize)
	return st.Blocks * size, (st.Blocks - st.Bfree) * size, nil
}
