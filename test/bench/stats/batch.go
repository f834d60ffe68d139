package stats

import (
	"fmt"
	"io"
	"time"
)

// Batch is a concurrent batch in the seed reports' section 3.2 columns
// (CubeSandbox's cube-bench): avg, min, p95, max, the batch's wall time,
// per-item amortised time (wall / n) and throughput.
type Batch struct {
	Name        string  `json:"name"`
	N           int     `json:"n"`
	Failed      int     `json:"failed,omitempty"`
	AvgMS       float64 `json:"avgMs"`
	MinMS       float64 `json:"minMs"`
	P95MS       float64 `json:"p95Ms"`
	MaxMS       float64 `json:"maxMs"`
	WallMS      float64 `json:"wallMs"`
	AmortisedMS float64 `json:"amortisedMs"`
	PerSecond   float64 `json:"perSecond"`
	Note        string  `json:"note,omitempty"`
}

// AddBatch adds n items' samples (ms; failed ones have none) under name
// to the table and returns the batch: wall is the whole batch's time.
func (t *Table) AddBatch(name string, samples []float64, n, failed int, wall time.Duration, note string) Batch {
	b := Batch{Name: name, N: n, Failed: failed, WallMS: MS(wall), AmortisedMS: MS(wall) / float64(n),
		PerSecond: float64(len(samples)) / wall.Seconds(), Note: note}
	if len(samples) == 0 {
		return b
	}
	t.Add(name, "ms", samples, note)
	r := t.Results[len(t.Results)-1]
	sum := 0.0
	for _, s := range samples {
		sum += s
	}
	b.AvgMS, b.MinMS, b.P95MS, b.MaxMS = sum/float64(len(samples)), r.Min, r.P95, r.Max
	return b
}

// PrintBatches writes batches as a table.
func PrintBatches(w io.Writer, bs []Batch) {
	fmt.Fprintf(w, "%-56s %6s %6s %10s %10s %10s %10s %10s %10s %10s\n", "batch", "n", "failed", "avg", "min", "p95", "max",
		"wall", "amortised", "per s")
	ms := func(v float64) string { return fmt.Sprintf("%.1fms", v) }
	for _, x := range bs {
		fmt.Fprintf(w, "%-56s %6d %6d %10s %10s %10s %10s %10s %10s %10.2f\n", x.Name, x.N, x.Failed, ms(x.AvgMS), ms(x.MinMS),
			ms(x.P95MS), ms(x.MaxMS), ms(x.WallMS), ms(x.AmortisedMS), x.PerSecond)
	}
}
