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
	settle(context.Background(), m, settleMax)
	if m.reads != m.busy+1 {
		t.Fatalf("settle read the stats %d times, want %d (busy windows, then one idle)", m.reads, m.busy+1)
	}
	if took := time.Since(began); took < time.Duration(m.busy-1)*settleWindow {
		t.Fatalf("settle returned after %v, before the busy windows passed", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	busy := &busyThenIdle{busy: 1000}
	settle(ctx, busy, settleMax)
	if busy.reads != 1 {
		t.Fatalf("a canceled settle read the stats %d times, want 1", busy.reads)
	}
}

// TestSettleBounded: a guest that stays busy (a template image that
// never idles) delays its pool VM's pause by the limit, no more.
func TestSettleBounded(t *testing.T) {
	busy := &busyThenIdle{busy: 1000}
	limit := 3 * settleWindow
	began := time.Now()
	settle(context.Background(), busy, limit)
	// Each read after the first waits a window: past the limit, no more.
	if took := time.Since(began); took < limit || busy.reads > 1+int(limit/settleWindow) {
		t.Fatalf("settle of a busy guest took %v and %d reads, want %v and at most %d", took, busy.reads, limit, 1+int(limit/settleWindow))
	}
}
