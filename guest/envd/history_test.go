package envd

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// fakeSeries stands in for the guest's /proc: each sample's Ts is the
// fake clock's, and owner is settable.
type fakeSeries struct {
	now   time.Time
	owner string
}

func (f *fakeSeries) history(every time.Duration, max int) *history {
	return newHistory(func() (Metrics, error) { return Metrics{Ts: f.now.Unix(), CPUCount: 1}, nil },
		func() string { return f.owner }, every, max)
}

func (f *fakeSeries) tick(h *history, d time.Duration) {
	f.now = f.now.Add(d)
	h.mu.Lock()
	h.tickLocked(f.now)
	h.mu.Unlock()
}

func TestHistoryKeepsTheLifeBounded(t *testing.T) {
	f := &fakeSeries{now: time.Unix(1_000_000, 0), owner: "a"}
	h := f.history(5*time.Second, 8)
	for range 7 {
		f.tick(h, 5*time.Second)
	}
	if len(h.samples) != 7 || h.every != 5*time.Second {
		t.Fatalf("after 7 ticks: %d samples every %v, want 7 every 5s", len(h.samples), h.every)
	}
	f.tick(h, 5*time.Second) // the 8th fills the ring: halved, interval doubled
	if len(h.samples) != 4 || h.every != 10*time.Second || h.samples[3].Ts != f.now.Unix() {
		t.Fatalf("after the ring filled: %d samples every %v, last %d; want 4 every 10s ending now", len(h.samples), h.every, h.samples[len(h.samples)-1].Ts)
	}
	f.tick(h, 5*time.Second) // not due at the new interval
	if len(h.samples) != 4 {
		t.Fatalf("sampled before the doubled interval: %d samples", len(h.samples))
	}
	f.tick(h, 5*time.Second)
	if len(h.samples) != 5 {
		t.Fatalf("missed a due sample: %d samples", len(h.samples))
	}
	first, last := h.samples[0].Ts, h.samples[4].Ts
	if got := h.between(first+1, last-1); len(got) != 3 {
		t.Fatalf("between the first and last exclusive: %d samples, want 3", len(got))
	}
	f.owner = "b" // a clone restored from this memory: the parent's samples go
	if got := h.between(0, 0); len(got) != 1 {
		t.Fatalf("after the owner changed: %d samples, want the one taken now", len(got))
	}
}

func TestHistoryRoute(t *testing.T) {
	f := &fakeSeries{now: time.Now(), owner: "a"}
	h := f.history(time.Second, 100)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for q, want := range map[string]int{"": http.StatusOK, "?start=1&end=9999999999": http.StatusOK,
		"?start=soon": http.StatusBadRequest, "?end=-4": http.StatusBadRequest} {
		resp, err := http.Get(srv.URL + q)
		if err != nil {
			t.Fatal(err)
		}
		var got []Metrics
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || len(got) != 1 {
				t.Errorf("%q: %v samples (%v), want the first one", q, len(got), err)
			}
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%q: status %d, want %d", q, resp.StatusCode, want)
		}
	}
}
