package envd

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Metrics over a sandbox's life (GET /metrics/history?start=&end=, unix
// seconds, both optional): sampled in the guest, so the series moves with
// the sandbox through pauses, snapshots and other nodes, as its memory
// does. Bounded: when the ring is full every other sample goes and the
// interval doubles, so the whole life stays covered, more coarsely.
const (
	historyEvery = 5 * time.Second
	historyMax   = 1440 // 2 h at 5 s; then 4 h at 10 s, ...
)

type history struct {
	sample func() (Metrics, error)
	owner  func() string // the sandbox the samples are of
	base   time.Duration
	max    int

	mu      sync.Mutex
	every   time.Duration
	of      string
	samples []Metrics
	last    time.Time
}

func newHistory(sample func() (Metrics, error), owner func() string, every time.Duration, max int) *history {
	return &history{sample: sample, owner: owner, base: every, max: max, every: every}
}

// run samples until the process ends (the guest agent lives as the VM does).
func (h *history) run() {
	t := time.NewTicker(h.base)
	defer t.Stop()
	for now := range t.C {
		h.mu.Lock()
		h.tickLocked(now)
		h.mu.Unlock()
	}
}

// tickLocked records a sample when there is none or its interval has
// passed. A restored clone's first tick drops the parent's.
func (h *history) tickLocked(now time.Time) {
	if id := h.owner(); id != h.of {
		h.of, h.samples, h.every = id, nil, h.base
	}
	if len(h.samples) > 0 && now.Sub(h.last) < h.every-h.base/10 {
		return
	}
	m, err := h.sample()
	if err != nil {
		return // the next tick tries again
	}
	h.samples, h.last = append(h.samples, m), now
	if len(h.samples) >= h.max {
		kept := h.samples[:0]
		for i := 1; i < len(h.samples); i += 2 { // the newest stays
			kept = append(kept, h.samples[i])
		}
		h.samples, h.every = kept, h.every*2
	}
}

// between returns the samples with start <= ts <= end (0: unbounded).
func (h *history) between(start, end int64) []Metrics {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tickLocked(time.Now()) // a new sandbox has one sample at once
	out := []Metrics{}
	for _, m := range h.samples {
		if (start == 0 || m.Ts >= start) && (end == 0 || m.Ts <= end) {
			out = append(out, m)
		}
	}
	return out
}

func (h *history) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var bounds [2]int64
	for i, name := range []string{"start", "end"} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			fail(w, r, http.StatusBadRequest, "invalid_argument", name+" must be a unix time in seconds, got "+strconv.Quote(v))
			return
		}
		bounds[i] = n
	}
	writeJSON(w, http.StatusOK, h.between(bounds[0], bounds[1]))
}
