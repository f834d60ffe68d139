package main

import (
	"context"
	"time"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
)

// The starts that land in a pod that exists: the template keeps a warm
// pool, and a resume or a sandbox from a snapshot claims one of its pods,
// where the node agent restores the sandbox's own data in place.
const (
	mPoolResume = "Local resume into a warm pool pod"
	mPoolSnap   = "Local snapshot start into a warm pool pod"
	mFloor      = "Bare QEMU restore to first answer (floor)"
)

func init() {
	placedOn[mPoolResume], placedOn[mPoolSnap] = "a warm pool pod", "a warm pool pod"
}

// poolRows measures mPoolResume on the sandboxes srcs (paused again,
// untimed, then removed) and mPoolSnap from the snapshots snaps. Before
// each batch the template's pool is filled (untimed) to as many pods per
// node as the batch starts on its busiest node (nodes, snapNodes: where
// each should start): the pods fit the nodes' CPU beside nothing else of
// the run. The pool is emptied after.
func (b *bench) poolRows(c int, srcs, nodes, snaps, snapNodes []string) {
	b.each("pause for the pool's resume", c, func(ctx context.Context, i int) (time.Duration, error) {
		d, err := b.pause(ctx, srcs[i])
		return d.paused, err
	})
	b.fillPool(busiest(nodes))
	b.add(mPoolResume, c, b.each(mPoolResume, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := b.resume(ctx, srcs[i])
		if err == nil {
			b.tally(mPoolResume, c, sbxbench.InPoolPod(s))
		}
		return d, err
	})...)
	b.fillPool(0)
	b.remove(sbxbench.Sandboxes(srcs)...)
	b.fillPool(busiest(snapNodes))
	kids := b.names("pk", c)
	b.add(mPoolSnap, c, b.each(mPoolSnap, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := sbxbench.Start(ctx, b.k, kids[i], sandlotv1.SandboxSource{Snapshot: snaps[i]})
		if err == nil {
			b.tally(mPoolSnap, c, sbxbench.InPoolPod(s))
		}
		return d, err
	})...)
	b.fillPool(0)
	b.remove(sbxbench.Sandboxes(kids)...)
}

// busiest is how many of nodes name the node named most.
func busiest(nodes []string) int {
	count, most := map[string]int{}, 0
	for _, n := range nodes {
		count[n]++
		most = max(most, count[n])
	}
	return most
}

// fillPool sets the template's warm pool to n per node and waits until
// each node has n unclaimed pool pods ready and none starting.
func (b *bench) fillPool(n int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := sbxbench.SetPool(ctx, b.k, "bench", n, b.nodeA, b.nodeB); err != nil {
		b.t.Fatal(err)
	}
}
