package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
)

const (
	// waitTimeout bounds one batch or one cleanup: a hundred TCG guests
	// restoring on two cores take minutes.
	waitTimeout = 10 * time.Minute
	// densityBatch sandboxes start at once in the density rows: a hundred
	// TCG guests restoring together on two cores would starve each other.
	densityBatch = 10
	// idle lets the guests settle after their start (and freed memory
	// after a cleanup) before memory is read.
	idle = 3 * time.Second
)

var tplSource = sandlotv1.SandboxSource{Template: tplName}

// fromTemplate measures C restores of the template's base snapshot.
func (b *bench) fromTemplate(c int) {
	row := rowTemplate(c)
	if why := b.fits(c); why != "" {
		b.skip(row, why)
		return
	}
	names := b.names("t", c)
	samples, wall := b.each(row, c, func(ctx context.Context, i int) (time.Duration, error) {
		_, d, err := sbxbench.Start(ctx, b.k, names[i], tplSource)
		return d, err
	})
	b.record(row, samples, wall, "")
	b.remove(sbxbench.Sandboxes(names)...)
}

// fromPool measures C creates with a full warm pool of C. The pool refills
// as it is claimed, during the batch, as it would in use; pool pods plus
// refills are 2C VMs.
func (b *bench) fromPool(c, poolMax int) {
	row := rowPool(c)
	if c > poolMax {
		b.skip(row, fmt.Sprintf("above -poolmax %d (each pool VM holds its memory)", poolMax))
		return
	}
	if why := b.fits(2 * c); why != "" {
		b.skip(row, why)
		return
	}
	b.setPool(c)
	names, claimed := b.names("p", c), make([]bool, c)
	samples, wall := b.each(row, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := sbxbench.Start(ctx, b.k, names[i], tplSource)
		if err == nil {
			claimed[i] = sbxbench.InPoolPod(s)
		}
		return d, err
	})
	b.setPool(0)
	b.remove(sbxbench.Sandboxes(names)...)
	k := 0
	for _, ok := range claimed {
		if ok {
			k++
		}
	}
	b.record(row, samples, wall, fmt.Sprintf("%d of %d claimed a pool pod", k, c))
}

// fork measures N children of one snapshot started at once. The parent
// goes before they start: only its data is needed, and N VMs are enough
// for two cores.
func (b *bench) fork(n int) { b.forkBatch(rowFork(n), n, 0) }

// forkIntoPool is fork with a warm pool of N filled first (untimed): each
// child claims a pool pod and the node agent restores the snapshot into it
// in place, so no pod starts. The pool refills during the batch, as it
// would in use.
func (b *bench) forkIntoPool(n int) { b.forkBatch(rowForkPool(n), n, n) }

// poolRefillSlack is room for the pool pods that refill a pool while its
// pods are claimed (at most two start at once; a batch sees a few).
const poolRefillSlack = 5

// forkBatch measures row: n children of a fresh snapshot at once, with a
// warm pool of pool pods (0: none) waiting for them.
func (b *bench) forkBatch(row string, n, pool int) {
	room := n
	if pool > 0 {
		room += poolRefillSlack
	}
	if why := b.fits(room); why != "" {
		b.skip(row, why)
		return
	}
	parent := b.started("fp", 1, tplSource)
	snap := b.snapshotsOf("fsnap", parent...)[0]
	if pool == 0 {
		b.paused = append(b.paused, float64(snap.Status.SourcePausedMicroseconds)/1000)
	}
	b.remove(sbxbench.Sandboxes(parent)...)
	b.setPool(pool)
	kids, claimed := b.names("fk", n), 0
	var mu sync.Mutex
	samples, wall := b.each(row, n, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := sbxbench.Start(ctx, b.k, kids[i], sandlotv1.SandboxSource{Snapshot: snap.Name})
		if err == nil && sbxbench.InPoolPod(s) {
			mu.Lock()
			claimed++
			mu.Unlock()
		}
		return d, err
	})
	b.setPool(0)
	note := ""
	if pool > 0 {
		note = fmt.Sprintf("%d of %d restored into a pool pod", claimed, n)
	}
	b.record(row, samples, wall, note)
	b.table.Add(row+": batch wall time", "ms", []float64{stats.MS(wall)}, "")
	b.remove(append(sbxbench.Sandboxes(kids), sbxbench.Snapshots([]string{snap.Name})...)...)
}

// rollbackLevel measures R in-place rollbacks at once, each sandbox to its
// own snapshot (a rollback restores only the sandbox's own).
func (b *bench) rollbackLevel(r int) {
	row := rowRollback(r)
	if why := b.fits(r); why != "" {
		b.skip(row, why)
		return
	}
	names := b.started("rb", r, tplSource)
	snaps := b.snapshotsOf("rbsnap", names...)
	ids := b.names("req", r)
	samples, wall := b.each(row, r, func(ctx context.Context, i int) (time.Duration, error) {
		return b.rollback(ctx, names[i], snaps[i].Name, ids[i])
	})
	b.record(row, samples, wall, "")
	snapNames := make([]string, r)
	for i, s := range snaps {
		snapNames[i] = s.Name
	}
	b.remove(append(sbxbench.Sandboxes(names), sbxbench.Snapshots(snapNames)...)...)
}

// densities measures each level that fits from one shared snapshot, its
// parent gone before any memory is read.
func (b *bench) densities(ds []int) {
	var fit []int
	for _, d := range ds {
		if why := b.fits(d); why != "" {
			b.skip(rowHostMem(d), why)
			continue
		}
		fit = append(fit, d)
	}
	if len(fit) == 0 {
		return
	}
	parent := b.started("dp", 1, tplSource)
	snap := b.snapshotsOf("dsnap", parent...)[0].Name
	b.remove(sbxbench.Sandboxes(parent)...)
	for _, d := range fit {
		b.density(d, snap)
	}
	b.remove(sbxbench.Snapshots([]string{snap})...)
}

// density starts D sandboxes, densityBatch at a time, and reads the host's
// MemAvailable drop and this cluster's QEMUs' PSS once they all answer.
func (b *bench) density(d int, snap string) {
	time.Sleep(idle)
	before := memAvailableMiB()
	names := b.names("d", d)
	for off := 0; off < d; off += densityBatch {
		n := min(densityBatch, d-off)
		b.each(fmt.Sprintf("density %d: sandboxes %d-%d", d, off+1, off+n), n, func(ctx context.Context, i int) (time.Duration, error) {
			_, dur, err := sbxbench.Start(ctx, b.k, names[off+i], sandlotv1.SandboxSource{Snapshot: snap})
			return dur, err
		})
	}
	time.Sleep(idle)
	after, pss := memAvailableMiB(), b.pssOf("qemu-system-x86_64")
	b.addMemory(rowHostMem(d), rowPSS(d), d, before, after, pss, fmt.Sprintf(
		"%d idle sandboxes forked from one snapshot, started %d at a time (each batch answering before the next)", d, densityBatch))
	shims := b.pssOf("containerd-shim-sandlot-v2")
	b.table.Add(rowShimPSS(d), "MiB", shims, fmt.Sprintf("each pod's shim process's Pss (%d shims)", len(shims)))
	b.remove(sbxbench.Sandboxes(names)...)
}

// pausedDensity measures D paused clones: a warm pool of D pods, each a
// restore of the template's base snapshot whose VM the shim pauses (D
// running TCG guests would saturate the 2 cores: their idle ticks alone
// starve the restores).
func (b *bench) pausedDensity(d int) {
	if why := b.fits(d); why != "" {
		b.skip(rowPausedMem(d), why)
		return
	}
	time.Sleep(idle)
	before := memAvailableMiB()
	b.setPool(d)
	time.Sleep(idle)
	after, pss := memAvailableMiB(), b.pssOf("qemu-system-x86_64")
	b.addMemory(rowPausedMem(d), rowPausedPSS(d), d, before, after, pss, fmt.Sprintf(
		"a warm pool of %d paused VMs restored from the template's base snapshot (the controller starts 2 at a time)", d))
	b.setPool(0)
	b.remove()
}

// addMemory adds a density level's rows: the host's MemAvailable drop per
// sandbox, and each QEMU's PSS.
func (b *bench) addMemory(memRow, pssRow string, d int, before, after float64, pss []float64, what string) {
	b.table.Add(memRow, "MiB", []float64{(before - after) / float64(d)}, fmt.Sprintf(
		"MemAvailable %.0f -> %.0f MiB over %s; host-wide: anything else running moves it", before, after, what))
	sum := 0.0
	for _, p := range pss {
		sum += p
	}
	b.table.Add(pssRow, "MiB", pss, fmt.Sprintf("each QEMU's Pss; their sum %.0f MiB over %d QEMU processes is %.1f MiB per sandbox",
		sum, len(pss), sum/float64(d)))
}

// started starts n sandboxes from src at once, untimed, and returns them
// once all answer.
func (b *bench) started(prefix string, n int, src sandlotv1.SandboxSource) []string {
	names := b.names(prefix, n)
	b.each("start "+prefix, n, func(ctx context.Context, i int) (time.Duration, error) {
		_, d, err := sbxbench.Start(ctx, b.k, names[i], src)
		return d, err
	})
	return names
}

// snapshotsOf takes one snapshot of each running sandbox, all at once,
// untimed, and returns them Ready.
func (b *bench) snapshotsOf(prefix string, srcs ...string) []*sandlotv1.Snapshot {
	names, out := b.names(prefix, len(srcs)), make([]*sandlotv1.Snapshot, len(srcs))
	b.each("snapshot "+prefix, len(srcs), func(ctx context.Context, i int) (time.Duration, error) {
		s, err := b.snapshot(ctx, names[i], srcs[i])
		out[i] = s
		return 0, err
	})
	return out
}

// snapshot takes a Snapshot of a running sandbox and returns it Ready.
func (b *bench) snapshot(ctx context.Context, name, sandbox string) (*sandlotv1.Snapshot, error) {
	snap := &sandlotv1.Snapshot{ObjectMeta: sbxbench.Meta(name),
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: sandbox}}}
	if err := b.k.Create(ctx, snap); err != nil {
		return nil, err
	}
	err := sbxbench.Until(ctx, b.k, &sandlotv1.SnapshotList{}, name, func(s *sandlotv1.Snapshot) (bool, error) {
		snap = s
		if s.Status.Phase == sandlotv1.DataFailed {
			return false, fmt.Errorf("snapshot %s failed: %+v", name, s.Status.Conditions)
		}
		return s.Status.Phase == sandlotv1.DataReady, nil
	})
	return snap, err
}

// rollback asks for an in-place rollback and returns the time from the
// patch until the agent reports this request done (lastRollbackRequestID
// and RolledBack True). A refusal or failure of it is an error.
func (b *bench) rollback(ctx context.Context, name, snap, id string) (time.Duration, error) {
	sbx := &sandlotv1.Sandbox{ObjectMeta: sbxbench.Meta(name)}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"rollback":{"snapshot":%q,"requestID":%q}}}`, snap, id))
	began := time.Now()
	if err := b.k.Patch(ctx, sbx, patch); err != nil {
		return 0, err
	}
	gen := sbx.Generation // a False condition of an older generation is not this request's
	err := sbxbench.Until(ctx, b.k, &sandlotv1.SandboxList{}, name, func(s *sandlotv1.Sandbox) (bool, error) {
		if err := sbxbench.Ended(s); err != nil {
			return false, err
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionRolledBack)
		switch {
		case c == nil:
			return false, nil
		case c.Status == metav1.ConditionTrue && s.Status.LastRollbackRequestID == id:
			return true, nil
		case c.Status == metav1.ConditionFalse && c.ObservedGeneration >= gen:
			return false, fmt.Errorf("sandbox %s: rollback %s: %s: %s", name, id, c.Reason, c.Message)
		}
		return false, nil
	})
	return time.Since(began), err
}

// setPool sets the template's warm pool size and waits until it is full.
func (b *bench) setPool(n int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := sbxbench.SetPool(ctx, b.k, tplName, n, b.node); err != nil {
		b.t.Fatal(err)
	}
}

// each runs job for 0..n-1 at once (stats.Concurrently) and returns the
// durations the jobs report and the batch's wall time. Any error fails
// the run here, on the run's goroutine: Fatalf from a job's goroutine
// would skip the cleanups.
func (b *bench) each(what string, n int, job func(ctx context.Context, i int) (time.Duration, error)) ([]float64, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	samples, wall, _, errs := stats.Concurrently(n, func() (time.Duration, func(), error) {
		d, err := job(ctx, <-next)
		return d, nil, err
	})
	if len(errs) > 0 {
		b.t.Fatalf("%s: %v", what, errs)
	}
	return samples, wall
}

// remove deletes objects and waits until they and every sandlot pod are
// gone (sbxbench.Remove); it is never part of a measurement.
func (b *bench) remove(objs ...client.Object) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := sbxbench.Remove(ctx, b.k, objs...); err != nil {
		b.t.Fatalf("cleanup: %v", err)
	}
}

func (b *bench) pssOf(name string) []float64 {
	entries, _ := os.ReadDir("/proc")
	var out []float64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv := bytes.Split(cmdline, []byte{0})
		if filepath.Base(string(argv[0])) != name || !bytes.Contains(cmdline, []byte(b.clusterDir+"/")) {
			continue
		}
		out = append(out, procKiB(filepath.Join("/proc", e.Name(), "smaps_rollup"), "Pss:")/1024)
	}
	return out
}

// memAvailableMiB is the host's MemAvailable.
func memAvailableMiB() float64 { return procKiB("/proc/meminfo", "MemAvailable:") / 1024 }

// procKiB reads a "<key> <n> kB" line of a /proc file.
func procKiB(path, key string) float64 {
	data, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb
		}
	}
	return 0
}
