package shim

import (
	"context"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/vm"
)

// busyThenIdle is a VM whose QEMU uses a whole core for busy reads of
// its stats, then nothing.
type busyThenIdle struct {
	machine
	busy  int
	reads int
	cpu   time.Duration
}

func (m *busyThenIdle) Stats() (vm.Stats, error) {
	m.reads++
	if m.reads <= m.busy {
		m.cpu += settleWindow
	}
	return vm.Stats{CPU: m.cpu}, nil
}

// TestSettleWaitsForIdle: a pool VM is paused once its guest stopped
// working, not while it still runs what its restore started.
func TestSettleWaitsForIdle(t *testing.T) {
	m := &busyThenIdle{busy: 4}
	began := time.Now()
	settle(context.Background(), m)
	if m.reads != m.busy+1 {
		t.Fatalf("settle read the stats %d times, want %d (busy windows, then one idle)", m.reads, m.busy+1)
	}
	if took := time.Since(began); took < time.Duration(m.busy-1)*settleWindow {
		t.Fatalf("settle returned after %v, before the busy windows passed", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	busy := &busyThenIdle{busy: 1000}
	settle(ctx, busy)
	if busy.reads != 1 {
		t.Fatalf("a canceled settle read the stats %d times, want 1", busy.reads)
	}
}
