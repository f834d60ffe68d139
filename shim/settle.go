package shim

import (
	"context"
	"time"
)

const (
	// settleWindow is how often a settling VM's CPU time is read (QEMU's
	// times move in 10 ms ticks).
	settleWindow = 100 * time.Millisecond
	// settledCPU: a VM that used less than this of a core over a window
	// is idle (an idle TCG guest uses ~1 %).
	settledCPU = 20 * time.Millisecond
	// settleMax bounds the wait.
	settleMax = 3 * time.Second
)

// settle waits until a restored warm pool VM is idle before the shim
// pauses it. A restore leaves the guest work to finish (the identity's
// side effects, timers due since the snapshot): paused at once, the guest
// does it when resumed by a claim, on the sandbox's start path (a resume
// and identity push took 23 ms instead of 9 ms, bench-vm). A guest that
// never goes idle (a template's own busy image) is paused
// after limit anyway.
func settle(ctx context.Context, m machine, limit time.Duration) {
	deadline := time.Now().Add(limit)
	last, err := m.Stats()
	for err == nil && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(settleWindow):
		}
		cur, serr := m.Stats()
		if serr != nil || cur.CPU-last.CPU < settledCPU {
			return
		}
		last, err = cur, serr
	}
}
