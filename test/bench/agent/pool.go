package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
			b.tally(mPoolResume, c, inPoolPod(s))
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
			b.tally(mPoolSnap, c, inPoolPod(s))
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

// inPoolPod: the sandbox runs in a pool pod (named by the pool, not after
// the sandbox).
func inPoolPod(s *sandlotv1.Sandbox) bool { return s.Status.PodName != s.Name }

// fillPool sets the template's warm pool to n per node and waits until
// each node has n unclaimed pool pods running and no others.
func (b *bench) fillPool(n int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"warmPool":%d}}`, n))
	if err := b.k.Patch(ctx, &sandlotv1.Template{ObjectMeta: sbxbench.Meta("bench")}, patch); err != nil {
		b.t.Fatalf("warm pool %d: %v", n, err)
	}
	for {
		pods := &corev1.PodList{}
		err := b.k.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{sandlotv1.LabelPool: "bench", sandlotv1.LabelSandbox: ""})
		if err == nil && poolFull(pods.Items, n, b.nodeA, b.nodeB) {
			return
		}
		select {
		case <-ctx.Done():
			b.t.Fatalf("warm pool of %d per node not ready: %v", n, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// poolFull: n running pool pods on each node, none starting or going.
func poolFull(pods []corev1.Pod, n int, nodes ...string) bool {
	per := map[string]int{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			return false
		}
		per[p.Spec.NodeName]++
	}
	for _, node := range nodes {
		if per[node] != n {
			return false
		}
	}
	return true
}
