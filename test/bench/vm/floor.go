package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/bare"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// bareRestore is the floor (package bare): a bare QEMU clone of snap,
// timed until envd's /health answers. The disk copy is made before the
// clock starts.
func (b *bench) bareRestore(ctx context.Context, snap string, g vmtest.Guest) (*bare.Clone, time.Duration, error) {
	return bare.Restore(ctx, snap, filepath.Join(b.dir, fmt.Sprint("bare", b.next())), g, g.WaitHealth)
}

// floorRestore is one bare restore of the floor's snapshot on its own
// address (10.0.2.15).
func (b *bench) floorRestore(ctx context.Context) (*bare.Clone, time.Duration, error) {
	g, err := vmtest.NewGuest("bare", "10.0.2.15", 2000)
	if err != nil {
		return nil, 0, err
	}
	return b.bareRestore(ctx, b.floorSnap, g)
}

// bareConcurrent starts n bare restores of the floor's snapshot at once
// (each on its own user-mode network) and measures the wall time until
// every guest answered: the floor a batch of n sandbox starts (a fork of
// n, n creates at once) is read against.
func (b *bench) bareConcurrent(ctx context.Context, n int) error {
	var mu sync.Mutex
	var clones []*bare.Clone
	var errs []error
	defer func() {
		for _, c := range clones {
			c.Stop()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			g, err := vmtest.NewGuest("bare", "10.0.2.15", 4000+i)
			var c *bare.Clone
			if err == nil {
				c, _, err = b.bareRestore(ctx, b.floorSnap, g)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			clones = append(clones, c)
		})
	}
	wg.Wait()
	wall := ms(time.Since(start))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%d of %d bare restores at once failed: %w", len(errs), n, err)
	}
	b.add(sbxbench.FloorConcurrentRow(n), "ms", []float64{wall}, fmt.Sprintf("%.2f restores/s", float64(n)/wall*1000))
	return nil
}

// cpuTicks is utime+stime of pid in clock ticks.
func cpuTicks(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	fields := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + k
}

// pssMiB is a process's proportional set size.
func pssMiB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// memAvailableMiB is the host's MemAvailable.
func memAvailableMiB() float64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
