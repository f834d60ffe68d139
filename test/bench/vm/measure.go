package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

func (b *bench) all(ctx context.Context) error {
	parent, pg, err := b.coldBoots(ctx)
	if err != nil {
		return err
	}
	defer parent.Stop()
	snap, err := b.firstGenSnapshots(ctx, parent)
	if err != nil {
		return err
	}
	// The floor's snapshot: the same parent as bare QEMU would have saved
	// it, network included (sandlot's own drop it: see vm.SnapshotOptions).
	b.floorSnap = filepath.Join(b.dir, "floor")
	if _, err := parent.SnapshotWith(ctx, b.floorSnap, vm.SnapshotOptions{KeepNetwork: true}); err != nil {
		return err
	}
	parent.Stop() // the clones run alone from here
	steps := []func(context.Context, string, vmtest.Guest) error{b.restores, b.concurrentRestores,
		b.restoredSnapshots, b.pauseResume, b.poolClaims, b.idleCPU, b.density}
	if b.floorOnly {
		steps = steps[:1]
		if b.floorClones > 0 {
			steps = append(steps, func(ctx context.Context, _ string, _ vmtest.Guest) error { return b.bareDensity(ctx, b.floorClones) })
		}
		for _, n := range b.floorConcurrent {
			steps = append(steps, func(ctx context.Context, _ string, _ vmtest.Guest) error { return b.bareConcurrent(ctx, n) })
		}
	}
	for _, step := range steps {
		if err := step(ctx, snap, pg); err != nil {
			return err
		}
	}
	return nil
}

// coldBoots boots the Debian disk n times (kept small: ~3 s each under
// TCG) and returns the last VM running, to be snapshotted.
func (b *bench) coldBoots(ctx context.Context) (*vm.VM, vmtest.Guest, error) {
	var samples []float64
	for i := range 3 {
		g, err := vmtest.NewGuest("parent", "10.0.2.15", 1000+i)
		if err != nil {
			return nil, g, err
		}
		start := time.Now()
		v, err := vm.Boot(ctx, b.env.Assets, b.config(g, b.env.Debian), g.Identity)
		if err != nil {
			return nil, g, err
		}
		if err := g.WaitHealth(ctx); err != nil {
			v.Stop()
			return nil, g, err
		}
		samples = append(samples, ms(time.Since(start)))
		if i == 2 {
			b.add("cold boot to envd answer", "ms", samples, "")
			_, err := g.RunCode(ctx, "1+1") // the interpreter warm in the snapshot
			return v, g, err
		}
		v.Stop()
	}
	panic("unreachable")
}

// firstGenSnapshots snapshots the booted VM: paused time and time until
// persisted (files, checksums, manifest).
func (b *bench) firstGenSnapshots(ctx context.Context, v *vm.VM) (string, error) {
	var paused, total []float64
	var first string
	for i := range 3 {
		dir := filepath.Join(b.dir, fmt.Sprint("gen1-", i))
		start := time.Now()
		m, err := v.Snapshot(ctx, dir)
		if err != nil {
			return "", err
		}
		total = append(total, ms(time.Since(start)))
		paused = append(paused, float64(m.PausedNanos)/1e6)
		if first == "" {
			first = dir
		}
	}
	b.add("snapshot, first-gen VM: paused", "ms", paused, "")
	b.add("snapshot, first-gen VM: until persisted", "ms", total, "")
	return first, nil
}

// restore restores the snapshot and waits for the guest's first answer.
func (b *bench) restore(ctx context.Context, snap, name string) (*vm.VM, vmtest.Guest, time.Duration, error) {
	start := time.Now()
	v, g, err := b.restoreVM(ctx, snap, name)
	if err != nil {
		return nil, g, 0, err
	}
	if err := g.WaitHealth(ctx); err != nil {
		v.Stop()
		return nil, g, 0, err
	}
	return v, g, time.Since(start), nil
}

// restoreVM restores a clone of snap, its identity pushed, and returns
// without waiting for the guest to answer anything else.
func (b *bench) restoreVM(ctx context.Context, snap, name string) (*vm.VM, vmtest.Guest, error) {
	g, err := b.guest(name)
	if err != nil {
		return nil, g, err
	}
	v, err := vm.Restore(ctx, "", b.config(g, ""), snap, g.Identity, vm.Roots{Store: b.dir, Images: b.env.Roots().Images})
	return v, g, err
}

// restores measures restore to first answer, sandlot's and the floor's
// alternately (one unmeasured pair first): on these noisy machines a
// block of one then a block of the other measured drift — the first-gen
// snapshot's writeback still running, a cold page cache — as a
// difference between them.
func (b *bench) restores(ctx context.Context, snap string, _ vmtest.Guest) error {
	var sandlot, floor []float64
	for i := range b.n + 1 {
		v, _, d, err := b.restore(ctx, snap, "r")
		if err != nil {
			return err
		}
		v.Stop()
		f, fd, err := b.floorRestore(ctx)
		if err != nil {
			return err
		}
		f.Stop()
		if i > 0 {
			sandlot, floor = append(sandlot, ms(d)), append(floor, ms(fd))
		}
	}
	b.add("restore to first answer (sandlot)", "ms", sandlot, "")
	b.add("restore to first answer (floor: bare QEMU)", "ms", floor, "")
	return nil
}

func (b *bench) concurrentRestores(ctx context.Context, snap string, _ vmtest.Guest) error {
	const n = 10
	var mu sync.Mutex
	var each []float64
	var vms []*vm.VM
	var firstErr error
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, _, d, err := b.restore(ctx, snap, "c")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = err
				return
			}
			each, vms = append(each, ms(d)), append(vms, v)
		}()
	}
	wg.Wait()
	wall := ms(time.Since(start))
	for _, v := range vms {
		v.Stop()
	}
	if firstErr != nil {
		return firstErr
	}
	b.add("restore to first answer, 10 concurrent: each", "ms", each, "")
	b.add("restore to first answer, 10 concurrent: all done", "ms", []float64{wall}, "")
	return nil
}

// restoredSnapshots snapshots a restored clone, idle and after it dirtied
// 64 MiB (the layered snapshot: its changed pages over the base).
func (b *bench) restoredSnapshots(ctx context.Context, snap string, _ vmtest.Guest) error {
	v, g, _, err := b.restore(ctx, snap, "layered")
	if err != nil {
		return err
	}
	defer v.Stop()
	for _, dirty := range []bool{false, true} {
		var paused, total, mib []float64
		for i := range 3 {
			if dirty {
				if _, err := g.Run(ctx, fmt.Sprintf("rm -f /tmp/d*; head -c 64M /dev/urandom > /tmp/d%d", i)); err != nil {
					return err
				}
			}
			start := time.Now()
			m, err := v.Snapshot(ctx, filepath.Join(b.dir, fmt.Sprintf("layered-%v-%d", dirty, i)))
			if err != nil {
				return err
			}
			total = append(total, ms(time.Since(start)))
			paused = append(paused, float64(m.PausedNanos)/1e6)
			mib = append(mib, float64(m.DirtyBytes)/(1<<20))
		}
		what := "idle"
		if dirty {
			what = "after dirtying 64 MiB"
		}
		b.add("snapshot, restored VM, "+what+": paused", "ms", paused, "")
		b.add("snapshot, restored VM, "+what+": until persisted", "ms", total, "")
		b.add("snapshot, restored VM, "+what+": changed pages", "MiB", mib, "")
	}
	return nil
}

func (b *bench) pauseResume(ctx context.Context, snap string, _ vmtest.Guest) error {
	v, g, _, err := b.restore(ctx, snap, "pr")
	if err != nil {
		return err
	}
	defer v.Stop()
	var pause, resume []float64
	for range 10 {
		start := time.Now()
		if err := v.Pause(ctx); err != nil {
			return err
		}
		pause = append(pause, ms(time.Since(start)))
		start = time.Now()
		if err := v.Resume(ctx); err != nil {
			return err
		}
		resume = append(resume, ms(time.Since(start)))
	}
	b.add("pause (QMP stop)", "ms", pause, "")
	b.add("resume (QMP cont)", "ms", resume, "")
	return b.claimIdentity(ctx, v, g)
}

// claimIdentity is a warm pool claim's guest side: the identity push
// into a running guest, and into one just resumed after idling paused
// (as a pool VM waits), each until the guest answered.
func (b *bench) claimIdentity(ctx context.Context, v *vm.VM, g vmtest.Guest) error {
	var running, resumed []float64
	for i := range 10 {
		id := g.Identity
		id.SandboxID, id.Hostname = fmt.Sprintf("claim%02d", i), fmt.Sprintf("claim%02d", i)
		start := time.Now()
		if _, err := v.SetIdentity(ctx, id); err != nil {
			return err
		}
		running = append(running, ms(time.Since(start)))
		if err := v.Pause(ctx); err != nil {
			return err
		}
		time.Sleep(time.Second) // the pool VM idles paused; what it waits for is no event
		start = time.Now()
		if err := v.Resume(ctx); err != nil {
			return err
		}
		if _, err := v.SetIdentity(ctx, id); err != nil {
			return err
		}
		resumed = append(resumed, ms(time.Since(start)))
	}
	b.add("identity push, running guest", "ms", running, "a claim's guest side without the resume")
	b.add("resume + identity push after 1 s paused", "ms", resumed, "a warm pool claim's guest side")
	return nil
}

// poolClaims is a warm pool VM's claim as the shim kept pool VMs until it
// let them settle first: restored, paused at once, then resumed with an
// identity push (the settled case is claimIdentity's resumed row).
func (b *bench) poolClaims(ctx context.Context, snap string, _ vmtest.Guest) error {
	var resumed []float64
	for i := range b.n {
		// Paused as soon as the restore (identity included) returned, as
		// the shim did, before anything asked the guest for more.
		v, g, err := b.restoreVM(ctx, snap, fmt.Sprintf("pool%d", i))
		if err != nil {
			return err
		}
		err = v.Pause(ctx)
		if err == nil {
			time.Sleep(time.Second) // the pool VM idles paused until a claim
			start := time.Now()
			if err = v.Resume(ctx); err == nil {
				_, err = v.SetIdentity(ctx, g.Identity)
			}
			resumed = append(resumed, ms(time.Since(start)))
		}
		v.Stop()
		if err != nil {
			return err
		}
	}
	b.add("resume + identity push, paused right after its restore", "ms", resumed, "a warm pool VM as the shim keeps it")
	return nil
}

// idleCPU is the host CPU an idle restored guest's QEMU takes, in % of
// one core, over 5 s windows.
func (b *bench) idleCPU(ctx context.Context, snap string, _ vmtest.Guest) error {
	v, _, _, err := b.restore(ctx, snap, "idle")
	if err != nil {
		return err
	}
	defer v.Stop()
	time.Sleep(2 * time.Second)
	var samples []float64
	for range 3 {
		c0 := cpuTicks(v.PID())
		time.Sleep(5 * time.Second)
		samples = append(samples, float64(cpuTicks(v.PID())-c0)/5) // 100 ticks/s = 100 %
	}
	b.add("host CPU of an idle guest (% of a core)", "%", samples, "")
	return nil
}
