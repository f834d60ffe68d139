package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/bare"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// floor is this run's bare QEMU floor (package bare, described in the
// package comment): its snapshot and the samples taken between levels.
type floor struct {
	snap, dir string
	seq       int
	floorStats
}

// floorStats are the floor's samples (ms): one restore + first command
// at a time (Single), and for each c > 1 each restore of c at once
// (Each), each batch's wall time until the last command answered (Walls)
// and its rate, answered per second (Rates). Failed counts failures by
// c, FirstErr keeps the first.
type floorStats struct {
	Single   []float64         `json:"single"`
	Each     map[int][]float64 `json:"each"`
	Walls    map[int][]float64 `json:"walls"`
	Rates    map[int][]float64 `json:"rates"`
	Failed   map[int]int       `json:"failed"`
	FirstErr map[int]string    `json:"firstError"`
}

func newFloorStats() floorStats {
	return floorStats{Each: map[int][]float64{}, Walls: map[int][]float64{}, Rates: map[int][]float64{}, Failed: map[int]int{},
		FirstErr: map[int]string{}}
}

// prepareFloor boots the floor's parent and snapshots it, before the
// cluster starts (its cold boot is not a sample).
func (b *bench) prepareFloor() {
	dir, err := os.MkdirTemp("", "bench-e2b-floor-")
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	snap, err := bare.Snapshot(ctx, dir)
	if err != nil {
		b.t.Fatal(err)
	}
	b.floor = &floor{snap: snap, dir: dir, floorStats: newFloorStats()}
}

// warmFloor starts one clone, not counted: the snapshot's files back in
// the page cache after the cluster's start.
func (b *bench) warmFloor() {
	ctx, cancel := context.WithTimeout(context.Background(), floorTimeout)
	defer cancel()
	if _, err := b.floor.one(ctx); err != nil {
		b.t.Logf("floor warm-up: %v", err)
	}
}

// sampleFloor takes the floor's samples before a level of c: n restores
// one after the other at c = 1, n batches of c restores at once at c > 1.
func (b *bench) sampleFloor(c, n int) {
	for range n {
		b.floor.sample(c)
	}
}

// floorTimeout bounds one floor sample or batch: a clone whose guest
// never answers is a failure, not a hang.
const floorTimeout = 2 * time.Minute

// sample takes one floor sample at c: a restore alone at c = 1, a batch
// of c at once above.
func (f *floor) sample(c int) {
	ctx, cancel := context.WithTimeout(context.Background(), floorTimeout)
	defer cancel()
	if c == 1 {
		d, err := f.one(ctx)
		if err != nil {
			f.fail(1, err)
			return
		}
		f.Single = append(f.Single, stats.MS(d))
		return
	}
	each, answered, wall, errs := f.atOnce(ctx, c)
	for _, err := range errs {
		f.fail(c, err)
	}
	if answered == 0 {
		return // no wall time to speak of: the failures say it
	}
	f.Each[c] = append(f.Each[c], each...)
	f.Walls[c] = append(f.Walls[c], stats.MS(wall))
	f.Rates[c] = append(f.Rates[c], float64(answered)/wall.Seconds())
}

// fail counts a failed floor sample at c and keeps the first error.
func (f *floor) fail(c int, err error) {
	f.Failed[c]++
	if _, ok := f.FirstErr[c]; !ok {
		f.FirstErr[c] = err.Error()
	}
}

// stage picks a clone's guest (its own user-mode network and ports) and
// copies its disk: before any clock starts.
func (f *floor) stage() (vmtest.Guest, *bare.Staged, error) {
	f.seq++
	g, err := vmtest.NewGuest("bare", bare.GuestIP, 2000+f.seq)
	if err != nil {
		return g, nil, fmt.Errorf("floor: %w", err)
	}
	st, err := bare.Stage(f.snap, filepath.Join(f.dir, fmt.Sprint("clone", f.seq)))
	return g, st, err
}

// one is one floor sample: a clone started, the first command answered
// in it, the clone stopped once timed.
func (f *floor) one(ctx context.Context) (time.Duration, error) {
	g, st, err := f.stage()
	if err != nil {
		return 0, err
	}
	c, d, err := st.Start(ctx, g, func(ctx context.Context) error { return bare.CommandWhenUp(ctx, g) })
	if err != nil {
		return 0, err
	}
	c.Stop()
	return d, nil
}

// atOnce starts c staged clones at once, each with its first command,
// and returns each one's time (ms), how many answered and the wall time
// until the last did; the clones are stopped after.
func (f *floor) atOnce(ctx context.Context, c int) (each []float64, answered int, wall time.Duration, errs []error) {
	type staged struct {
		g  vmtest.Guest
		st *bare.Staged
	}
	ready := make(chan staged, c)
	for range c {
		g, st, err := f.stage()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ready <- staged{g, st}
	}
	close(ready)
	each, wall, cleanups, startErrs := stats.Concurrently(len(ready), func() (time.Duration, func(), error) {
		s := <-ready
		cl, d, err := s.st.Start(ctx, s.g, func(ctx context.Context) error { return bare.CommandWhenUp(ctx, s.g) })
		if err != nil {
			return 0, nil, err
		}
		return d, cl.Stop, nil
	})
	for _, stop := range cleanups {
		stop()
	}
	return each, len(each), wall, append(errs, startErrs...)
}

// Rows of the floor in the table.
const floorSingleRow = "floor: bare QEMU restore + first command"

func floorEachRow(c int) string { return fmt.Sprintf("floor, %d at once: each", c) }

func floorWallRow(c int) string { return fmt.Sprintf("floor, %d at once: all answered", c) }

// addRows adds the floor's rows to t and returns a line for each that
// failed whole (no row carries its note).
func (f floorStats) addRows(t *stats.Table) (failed []string) {
	where := "this run, before each level, the cluster up and idle"
	add := func(name string, samples []float64, c int) {
		if len(samples) == 0 && f.Failed[c] > 0 {
			failed = append(failed, name+": "+f.failedNote(c))
		}
		t.Add(name, "ms", samples, joinNotes(where, f.failedNote(c)))
	}
	add(floorSingleRow, f.Single, 1)
	for _, c := range f.levels() {
		add(floorEachRow(c), f.Each[c], c)
		t.Add(floorWallRow(c), "ms", f.Walls[c], fmt.Sprintf("median %.2f answered/s", stats.Median(f.Rates[c])))
	}
	return failed
}

// levels are the floor's concurrency levels above 1, in order.
func (f floorStats) levels() []int {
	cs := slices.Collect(maps.Keys(f.Each))
	for c := range f.Failed {
		if _, ok := f.Each[c]; !ok && c > 1 {
			cs = append(cs, c)
		}
	}
	slices.Sort(cs)
	return cs
}

func (f floorStats) failedNote(c int) string {
	if f.Failed[c] == 0 {
		return ""
	}
	return fmt.Sprintf("%d failed, the first: %s", f.Failed[c], f.FirstErr[c])
}
