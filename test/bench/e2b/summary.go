package main

import (
	"fmt"
	"io"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/stats"
)

// levelStat is one level as measured.
type levelStat struct {
	Mode, Pool string
	C, N       int
	Wall       time.Duration
	result     levelResult
}

// Issue 34's targets: create -> first command against the floor (at most
// 1.5x with a warm pool, 2x without), and at c = 10 the first commands
// answered per second against ten floors at once (at least 0.5x).
const (
	targetWithPool    = 1.5
	targetWithoutPool = 2.0
	targetRate        = 0.5
	targetRateLevel   = 10
)

// summaryRow is one level against the floor. Medians in ms; a 0 floor,
// rate or target is absent.
type summaryRow struct {
	Level          string  `json:"level"`
	C              int     `json:"c"`
	N              int     `json:"n"`
	CreateFailed   int     `json:"createFailed"`
	CommandFailed  int     `json:"commandFailed"` // after a 201
	CreateMedian   float64 `json:"createMedianMs"`
	CommandMedian  float64 `json:"firstCommandMedianMs"`
	FloorMedian    float64 `json:"floorMedianMs"` // at c > 1: each of c restores at once
	Ratio          float64 `json:"ratio"`
	Target         float64 `json:"target"`
	PerSecond      float64 `json:"perSecond,omitempty"`      // first commands answered / level wall time
	FloorPerSecond float64 `json:"floorPerSecond,omitempty"` // c floors at once, answered / wall
	RateRatio      float64 `json:"rateRatio,omitempty"`
	RateTarget     float64 `json:"rateTarget,omitempty"`
}

// summarize reads each level against the floor of its concurrency: the
// floor one at a time at c = 1, each of c restores at once at c > 1 (and
// their rate).
func summarize(levels []levelStat, f floorStats) []summaryRow {
	var rows []summaryRow
	for _, l := range levels {
		r := summaryRow{Level: levelName(l.Mode, l.Pool, l.C), C: l.C, N: l.N,
			CreateFailed: l.result.createFailed, CommandFailed: l.result.commandFailed,
			CreateMedian: stats.Median(l.result.creates), CommandMedian: stats.Median(l.result.commands),
			FloorMedian: stats.Median(f.Single), Target: targetWithoutPool}
		if l.Pool == "with" {
			r.Target = targetWithPool
		}
		if l.C > 1 {
			r.FloorMedian = stats.Median(f.Each[l.C])
			if l.Wall > 0 {
				r.PerSecond = float64(len(l.result.commands)) / l.Wall.Seconds()
			}
			r.FloorPerSecond = stats.Median(f.Rates[l.C])
			r.RateRatio = ratio(r.PerSecond, r.FloorPerSecond)
		}
		if l.C == targetRateLevel {
			r.RateTarget = targetRate
		}
		r.Ratio = ratio(r.CommandMedian, r.FloorMedian)
		rows = append(rows, r)
	}
	return rows
}

// ratio is a / b, 0 when either is missing.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

// verdict reads a ratio against its target: at most (a time) or at
// least (a rate).
func verdict(ratio, target float64, atMost bool) string {
	switch {
	case ratio == 0:
		return "-"
	case target == 0:
		return fmt.Sprintf("%.2fx", ratio)
	}
	op, word := ">=", "missed"
	if atMost {
		op = "<="
	}
	if atMost && ratio <= target || !atMost && ratio >= target {
		word = "met"
	}
	return fmt.Sprintf("%.2fx (%s%.1fx: %s)", ratio, op, target, word)
}

func msOrDash(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", v)
}

func rateOrDash(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// printSummary writes the rows as a table under what they compare.
func printSummary(w io.Writer, rows []summaryRow) {
	fmt.Fprintln(w, "# create -> first command (process.Process/Start of /bin/sh -c true through sandlot-api's proxy) "+
		"against the floor: a bare QEMU restore + the same command, this run, before each level (at c > 1: c at once)")
	fmt.Fprintf(w, "# targets (issue 34): first command <= %.1fx the floor with a warm pool, <= %.1fx without; "+
		"at c = %d, first commands answered per s >= %.1fx that of %d floors at once\n",
		targetWithPool, targetWithoutPool, targetRateLevel, targetRate, targetRateLevel)
	fmt.Fprintf(w, "%-40s %4s %7s %10s %10s %10s %-26s %8s %8s %s\n", "level", "n", "failed", "201", "1st cmd",
		"floor", "1st cmd / floor", "cmd/s", "floor/s", "cmd/s / floor/s")
	for _, r := range rows {
		rate := "-"
		if r.C > 1 {
			rate = verdict(r.RateRatio, r.RateTarget, false)
		}
		fmt.Fprintf(w, "%-40s %4d %7s %10s %10s %10s %-26s %8s %8s %s\n", r.Level, r.N,
			fmt.Sprintf("%d+%d", r.CreateFailed, r.CommandFailed), msOrDash(r.CreateMedian), msOrDash(r.CommandMedian),
			msOrDash(r.FloorMedian), verdict(r.Ratio, r.Target, true), rateOrDash(r.PerSecond), rateOrDash(r.FloorPerSecond), rate)
	}
	fmt.Fprintln(w, "(medians; failed: creates + first commands after a 201; cmd/s: first commands answered per second of the level)")
}
