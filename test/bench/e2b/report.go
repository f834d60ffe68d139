package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/stats"
)

// report prints the floor's rows and every measure, the levels'
// batches, the summary against the floor, the builds' ratios and the
// notes; or all of it as JSON.
func (b *bench) report(w io.Writer, asJSON bool) {
	var t stats.Table
	f := newFloorStats()
	if b.floor != nil {
		f = b.floor.floorStats
	}
	floorFailed := f.addRows(&t)
	t.Results = append(t.Results, b.table.Results...)
	rows := summarize(b.levels, f)
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"header": b.header(), "results": t.Results, "batches": b.batches,
			"summary": rows, "floor": f, "at": time.Now().UTC().Format(time.RFC3339)})
		return
	}
	t.Print(w, b.header())
	fmt.Fprintln(w)
	stats.PrintBatches(w, b.batches)
	fmt.Fprintln(w)
	if len(rows) > 0 {
		printSummary(w, rows)
		fmt.Fprintln(w)
	}
	b.table.Ratio(w, rowBuild, rowByHand)
	b.table.Ratio(w, rowCached, rowByHand)
	b.table.Ratio(w, rowStep3, rowBuild)
	for _, r := range t.Results {
		if r.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Name, r.Note)
		}
	}
	for _, l := range floorFailed {
		fmt.Fprintln(w, l)
	}
	for _, bt := range b.batches {
		if bt.Note != "" && bt.Failed == bt.N { // all failed: no row carries the note
			fmt.Fprintf(w, "%s: %s\n", bt.Name, bt.Note)
		}
	}
}
