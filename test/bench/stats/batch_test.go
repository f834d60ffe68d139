package stats

import (
	"testing"
	"time"
)

// TestAddBatch: section 3.2's columns from samples and the wall time;
// failed items count in n and the amortised time, not in throughput.
func TestAddBatch(t *testing.T) {
	var tb Table
	b := tb.AddBatch("c=4", []float64{100, 200, 300}, 4, 1, 2*time.Second, "")
	want := Batch{Name: "c=4", N: 4, Failed: 1, AvgMS: 200, MinMS: 100, P95MS: 300, MaxMS: 300, WallMS: 2000,
		AmortisedMS: 500, PerSecond: 1.5}
	if b != want {
		t.Fatalf("AddBatch = %+v, want %+v", b, want)
	}
	if len(tb.Results) != 1 || tb.Results[0].Median != 200 {
		t.Fatalf("table %+v: want the samples added once", tb.Results)
	}
	if e := tb.AddBatch("none", nil, 2, 2, time.Second, ""); e.AvgMS != 0 || len(tb.Results) != 1 {
		t.Fatalf("all failed: %+v, table %d rows", e, len(tb.Results))
	}
}

// TestMedian: the table's median, of any count.
func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 3}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
		var tb Table
		tb.Add("x", "ms", c.in, "")
		if len(c.in) > 0 && tb.Median("x") != c.want {
			t.Errorf("table median of %v = %v, want %v", c.in, tb.Median("x"), c.want)
		}
	}
}
