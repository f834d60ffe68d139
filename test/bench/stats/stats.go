// Package stats is the benchmark commands' table: samples summarised as
// min / median / p95 / max, printed as text or JSON.
package stats

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"
)

// Result is one measure's samples and summary.
type Result struct {
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`
	Samples []float64 `json:"samples"`
	Min     float64   `json:"min"`
	Median  float64   `json:"median"`
	P95     float64   `json:"p95"`
	Max     float64   `json:"max"`
	Note    string    `json:"note,omitempty"`
}

// Table collects results in the order they were measured.
type Table struct {
	Results []Result
}

// Add summarises samples under name (unit "ms", "MiB", "%", "Mbit/s" or "").
func (t *Table) Add(name, unit string, samples []float64, note string) {
	if len(samples) == 0 {
		return
	}
	s := sorted(samples)
	t.Results = append(t.Results, Result{Name: name, Unit: unit, Samples: samples, Min: s[0], Median: pick(s, 0.5),
		P95: pick(s, 0.95), Max: s[len(s)-1], Note: note})
}

func sorted(samples []float64) []float64 {
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	return s
}

// pick is the p quantile of sorted samples, as the table reports it (the
// nearest rank; of an even count, the upper middle for the median).
func pick(s []float64, p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }

// Quantile is the p quantile of samples as the table reports it, NaN
// for none.
func Quantile(samples []float64, p float64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	return pick(sorted(samples), p)
}

// Median of samples as the table reports it, 0 for none.
func Median(samples []float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	return pick(sorted(samples), 0.5)
}

// Median of a measure, 0 if absent.
func (t *Table) Median(name string) float64 {
	for _, r := range t.Results {
		if r.Name == name {
			return r.Median
		}
	}
	return 0
}

// Print writes the table under a header line.
func (t *Table) Print(w io.Writer, header string) {
	fmt.Fprintf(w, "# %s\n", header)
	fmt.Fprintf(w, "%-64s %6s %10s %10s %10s %10s\n", "measure", "n", "min", "median", "p95", "max")
	for _, r := range t.Results {
		fmt.Fprintf(w, "%-64s %6d %10s %10s %10s %10s\n", r.Name, len(r.Samples), format(r.Min, r.Unit),
			format(r.Median, r.Unit), format(r.P95, r.Unit), format(r.Max, r.Unit))
	}
}

// Ratio prints the ratio of two measures' medians.
func (t *Table) Ratio(w io.Writer, a, b string) {
	if x, y := t.Median(a), t.Median(b); y > 0 {
		fmt.Fprintf(w, "%s / %s: %.2fx\n", a, b, x/y)
	}
}

// JSON writes the results.
func (t *Table) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(t.Results)
}

func format(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.1fms", v)
	case "MiB":
		return fmt.Sprintf("%.1fMiB", v)
	case "%":
		return fmt.Sprintf("%.1f%%", v)
	case "Mbit/s":
		return fmt.Sprintf("%.1fMb/s", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// MS is a duration in milliseconds.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Concurrently runs start n times at once. Each returns its time, a
// cleanup (run by the caller after measuring, so cleanups do not load the
// machine while others still start) and an error.
func Concurrently(n int, start func() (time.Duration, func(), error)) (samples []float64, total time.Duration, cleanups []func(), errs []error) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	began := time.Now()
	for range n {
		wg.Go(func() {
			d, cleanup, err := start()
			mu.Lock()
			defer mu.Unlock()
			if cleanup != nil {
				cleanups = append(cleanups, cleanup)
			}
			if err != nil {
				errs = append(errs, err)
				return
			}
			samples = append(samples, MS(d))
		})
	}
	wg.Wait()
	return samples, time.Since(began), cleanups, errs
}
