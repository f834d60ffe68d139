package main

import (
	"errors"
	"testing"
	"time"
)

// TestSummarize: each level against the floor of its concurrency, the
// warm pool's target and the rate's at c = 10 only; failures are counted,
// never samples.
func TestSummarize(t *testing.T) {
	f := newFloorStats()
	f.Single = []float64{100, 120, 110}
	f.Each[10] = []float64{400, 500, 600}
	f.Rates[10] = []float64{10, 8, 12}
	f.Each[20] = []float64{900}
	f.Rates[20] = []float64{15}
	var with, without, twenty levelResult
	with.add(started{id: "a", toCreated: 50 * time.Millisecond, toCommand: 150 * time.Millisecond}, 0, nil)
	with.add(started{createErr: errors.New("503")}, 0, nil)
	without.add(started{id: "b", toCreated: 800 * time.Millisecond, toCommand: time.Second}, 0, nil)
	without.add(started{id: "c", toCreated: 700 * time.Millisecond, commandErr: errors.New("502")}, 0, nil)
	twenty.add(started{id: "d", toCreated: time.Second, toCommand: 2 * time.Second}, 0, nil)
	rows := summarize([]levelStat{
		{Mode: "create-only", Pool: "with", C: 1, N: 2, Wall: time.Second, result: with},
		{Mode: "create-only", Pool: "without", C: 10, N: 2, Wall: 2 * time.Second, result: without},
		{Mode: "create-only", Pool: "slots", C: 20, N: 1, Wall: time.Second, result: twenty},
	}, f)
	want := []summaryRow{
		{Level: "create-only, with warm pool, c=1", C: 1, N: 2, CreateFailed: 1, CreateMedian: 50, CommandMedian: 150,
			FloorMedian: 110, Ratio: 150.0 / 110, Target: 1.5},
		{Level: "create-only, without warm pool, c=10", C: 10, N: 2, CommandFailed: 1, CreateMedian: 800, CommandMedian: 1000,
			FloorMedian: 500, Ratio: 2, Target: 2, PerSecond: 0.5, FloorPerSecond: 10, RateRatio: 0.05, RateTarget: 0.5},
		{Level: "create-only, start slots, c=20", C: 20, N: 1, CreateMedian: 1000, CommandMedian: 2000,
			FloorMedian: 900, Ratio: 2000.0 / 900, Target: 2, PerSecond: 1, FloorPerSecond: 15, RateRatio: 1.0 / 15},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, rows[i], want[i])
		}
	}
}

// TestLevelResult: a failed create is no sample of either kind; a failed
// first command keeps the 201's sample and its sandbox for cleanup; a
// failed delete keeps the sandbox for cleanup.
func TestLevelResult(t *testing.T) {
	var r levelResult
	r.add(started{createErr: errors.New("first")}, 0, nil)
	r.add(started{createErr: errors.New("second")}, 0, nil)
	r.add(started{id: "a", toCreated: 10 * time.Millisecond, commandErr: errors.New("502")}, 0, nil)
	r.add(started{id: "b", toCreated: 20 * time.Millisecond, toCommand: 50 * time.Millisecond}, 5*time.Millisecond, nil)
	r.add(started{id: "c", toCreated: 30 * time.Millisecond, toCommand: 60 * time.Millisecond}, time.Millisecond, errors.New("500"))
	if r.createFailed != 2 || r.commandFailed != 1 || r.deleteFailed != 1 || r.createErr.Error() != "first" {
		t.Errorf("failures %d/%d/%d, first %v", r.createFailed, r.commandFailed, r.deleteFailed, r.createErr)
	}
	if len(r.creates) != 3 || len(r.commands) != 2 || r.afterCreate[0] != 30 || r.afterCreate[1] != 30 || len(r.deletes) != 1 {
		t.Errorf("samples: creates %v, commands %v, after %v, deletes %v", r.creates, r.commands, r.afterCreate, r.deletes)
	}
	if len(r.ids) != 2 || r.ids[0] != "a" || r.ids[1] != "c" {
		t.Errorf("left for cleanup: %v, want [a c]", r.ids)
	}
}

func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		ratio, target float64
		atMost        bool
		want          string
	}{
		{0, 1.5, true, "-"},
		{1.2, 0, true, "1.20x"},
		{1.5, 1.5, true, "1.50x (<=1.5x: met)"},
		{2.01, 2, true, "2.01x (<=2.0x: missed)"},
		{0.5, 0.5, false, "0.50x (>=0.5x: met)"},
		{0.38, 0.5, false, "0.38x (>=0.5x: missed)"},
	} {
		if got := verdict(c.ratio, c.target, c.atMost); got != c.want {
			t.Errorf("verdict(%v, %v, %v) = %q, want %q", c.ratio, c.target, c.atMost, got, c.want)
		}
	}
}
