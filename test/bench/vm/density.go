package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/bare"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

// FloorDensityRow is the bare clones' density row (sbxbench.FloorRows
// reads it by this name).
const FloorDensityRow = "host free-memory drop per idle clone (floor)"

// density restores 20 clones (sandlot), lets them idle, and measures each
// QEMU's PSS and the host's free-memory drop per clone; then the same
// for 20 bare clones. Clones are started 5 at a time.
func (b *bench) density(ctx context.Context, snap string, _ vmtest.Guest) error {
	const n = 20
	before := memAvailableMiB()
	var vms []*vm.VM
	defer func() {
		for _, v := range vms {
			v.Stop()
		}
	}()
	for len(vms) < n {
		v, _, _, err := b.restore(ctx, snap, "d")
		if err != nil {
			return err
		}
		vms = append(vms, v)
	}
	time.Sleep(3 * time.Second)
	var pss []float64
	for _, v := range vms {
		pss = append(pss, pssMiB(v.PID()))
	}
	drop := (before - memAvailableMiB()) / n
	for _, v := range vms {
		v.Stop()
	}
	vms = nil
	b.add("idle clone PSS (sandlot)", "MiB", pss, "")
	b.add("host free-memory drop per idle clone (sandlot)", "MiB", []float64{drop}, "")
	return b.bareDensity(ctx, n)
}

// bareDensity restores n bare QEMU clones of the floor's snapshot and
// measures their PSS and the host's free-memory drop per clone.
func (b *bench) bareDensity(ctx context.Context, n int) error {
	time.Sleep(time.Second)
	before := memAvailableMiB()
	var clones []*bare.Clone
	defer func() {
		for _, c := range clones {
			c.Stop()
		}
	}()
	for i := range n {
		// Bare clones keep the snapshot's address; each has its own
		// user-mode network, so they do not collide.
		g, err := vmtest.NewGuest("bare", "10.0.2.15", 3000+i)
		if err != nil {
			return err
		}
		c, _, err := b.bareRestore(ctx, b.floorSnap, g)
		if err != nil {
			return err
		}
		clones = append(clones, c)
	}
	time.Sleep(3 * time.Second)
	var pss []float64
	for _, c := range clones {
		pss = append(pss, pssMiB(c.PID()))
	}
	drop := (before - memAvailableMiB()) / float64(n)
	b.add("idle clone PSS (floor: bare QEMU clone)", "MiB", pss, "")
	b.add(FloorDensityRow, "MiB", []float64{drop}, fmt.Sprintf("%d clones", n))
	return nil
}
