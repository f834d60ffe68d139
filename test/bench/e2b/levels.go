package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
)

// poolNames name the levels' started pods in the table.
var poolNames = map[string]string{"without": "without warm pool", "slots": "start slots", "with": "with warm pool"}

// levelName names a level's rows: "create-only, with warm pool, c=10".
func levelName(mode, pool string, c int) string {
	return fmt.Sprintf("%s, %s, c=%d", mode, poolNames[pool], c)
}

// level runs n starts on c workers and records the level; pool says
// which pods are started before it: none, start slots or a warm pool.
func (b *bench) level(mode, pool string, c, n, poolMax int) {
	name := levelName(mode, pool, c)
	size := 0
	if pool != "without" {
		size = min(n, poolMax)
		b.setPool(pool, size)
	}
	h, err := watchHops(b.k, sbxbench.Meta(tplName).Namespace)
	if err != nil {
		b.t.Fatal(err)
	}
	b.hops = h
	began := time.Now()
	r := b.runWorkers(mode, c, n)
	wall := time.Since(began)
	b.hops = nil
	h.stop(&b.table, name)
	b.record(levelStat{Mode: mode, Pool: pool, C: c, N: n, Wall: wall, result: r}, size)
	for _, id := range r.ids {
		if _, err := b.kill(id); err != nil {
			b.t.Fatalf("cleanup: %v", err)
		}
	}
	if size > 0 {
		b.setPool(pool, 0)
	}
	b.settle()
}

// record adds a level's batches (create -> 201, create -> first
// command), its 201 -> first command and delete rows, and keeps it for
// the summary.
func (b *bench) record(l levelStat, poolSize int) {
	name := levelName(l.Mode, l.Pool, l.C)
	note := ""
	if poolSize > 0 {
		note = fmt.Sprintf("%d per node, full at the start", poolSize)
	}
	r := l.result
	deletes := ""
	if r.deleteFailed > 0 {
		deletes = fmt.Sprintf("%d deletes failed", r.deleteFailed)
	}
	createNote := joinNotes(note, errNote("first create error", r.createErr), deletes, errNote("first delete error", r.deleteErr))
	b.batches = append(b.batches, b.table.AddBatch(name, r.creates, l.N, r.createFailed, l.Wall, createNote))
	failed := ""
	if r.createFailed+r.commandFailed > 0 {
		failed = fmt.Sprintf("%d creates failed, %d first commands after a 201 failed", r.createFailed, r.commandFailed)
	}
	cmdNote := joinNotes(failed, errNote("first command error", r.commandErr))
	b.batches = append(b.batches, b.table.AddBatch(name+": first command", r.commands, l.N, r.createFailed+r.commandFailed,
		l.Wall, cmdNote))
	b.table.Add(name+": 201 -> first command", "ms", r.afterCreate, "") // the proxy, envd, the process
	if len(r.seconds) > 0 {                                             // where the first command's time goes
		b.table.Add(name+": a second command through the proxy", "ms", r.seconds, "")
		b.table.Add(name+": a command straight to the pod's envd", "ms", r.directs, "")
	}
	if len(r.deletes) > 0 {
		b.table.Add(name+": delete", "ms", r.deletes, "")
	}
	b.levels = append(b.levels, l)
}

func errNote(what string, err error) string {
	if err == nil {
		return ""
	}
	return what + ": " + err.Error()
}

func joinNotes(notes ...string) string {
	var kept []string
	for _, n := range notes {
		if n != "" {
			kept = append(kept, n)
		}
	}
	return strings.Join(kept, "; ")
}

// levelResult is what one level's workers measured (ms): a sample only
// for what succeeded, a failure counted for what did not.
type levelResult struct {
	creates, commands, afterCreate, deletes   []float64
	seconds, directs                          []float64 // c = 1: started.second, started.direct
	ids                                       []string  // created and not deleted: cleaned up after the level
	createFailed, commandFailed, deleteFailed int
	createErr, commandErr, deleteErr          error // the first of each
}

// runWorkers runs n starts (each followed by its delete in create-delete
// mode) on c workers.
func (b *bench) runWorkers(mode string, c, n int) levelResult {
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	var (
		mu sync.Mutex
		r  levelResult
		wg sync.WaitGroup
	)
	for range c {
		wg.Go(func() {
			for range jobs {
				s := b.start()
				if c == 1 && s.createErr == nil && s.commandErr == nil {
					b.breakdown(&s)
				}
				var kd time.Duration
				var kerr error
				if s.createErr == nil && mode == "create-delete" {
					kd, kerr = b.kill(s.id)
				}
				mu.Lock()
				r.add(s, kd, kerr)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return r
}

// add counts one start and its delete (kill 0: none made). A sandbox
// whose delete failed or was not made is cleaned up after the level.
func (r *levelResult) add(s started, kill time.Duration, killErr error) {
	if s.createErr != nil {
		r.createFailed++
		r.createErr = firstOf(r.createErr, s.createErr)
		return
	}
	r.creates = append(r.creates, stats.MS(s.toCreated))
	if s.commandErr != nil {
		r.commandFailed++
		r.commandErr = firstOf(r.commandErr, s.commandErr)
	} else {
		r.commands = append(r.commands, stats.MS(s.toCommand))
		r.afterCreate = append(r.afterCreate, stats.MS(s.toCommand-s.toCreated))
		if s.second > 0 {
			r.seconds, r.directs = append(r.seconds, stats.MS(s.second)), append(r.directs, stats.MS(s.direct))
		}
	}
	switch {
	case killErr != nil:
		r.deleteFailed++
		r.deleteErr = firstOf(r.deleteErr, killErr)
		r.ids = append(r.ids, s.id)
	case kill > 0:
		r.deletes = append(r.deletes, stats.MS(kill))
	default:
		r.ids = append(r.ids, s.id)
	}
}

func firstOf(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func (b *bench) setPool(pool string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	set := sbxbench.SetPool
	if pool == "slots" {
		set = sbxbench.SetSlots
	}
	if err := set(ctx, b.k, tplName, n, b.node); err != nil {
		b.t.Fatal(err)
	}
}

// settle waits until every sandlot pod is gone between levels.
func (b *bench) settle() {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := sbxbench.Remove(ctx, b.k); err != nil {
		b.t.Fatalf("cleanup: %v", err)
	}
}
