// Command agent benchmarks the node agent's snapshot store on a real
// two-node cluster on this machine, in the shape of CubeSandbox's JuiceFS
// seed report (sections 4.1–4.4), each row at every concurrency of -c:
//
//   - 4.1 template start (a restore of the template's base snapshot, built
//     before the measurements), the Snapshot API
//     (Create to phase Ready) and, with a shared store, the upload on to remote Ready;
//   - 4.2 start from a local snapshot, pause (to phase Paused with the pod
//     gone), the pause package's upload (shared store) and resume on the same node;
//   - 4.3 (shared store) start from a fresh snapshot on the other node, its data
//     fetched from the store;
//   - 4.4 (shared store) resume on the other node;
//   - resumes and snapshot starts into warm pool pods (the template's pool
//     filled to c per node first): the pod exists, the agent restores the
//     sandbox's data into it in place; beside the bare QEMU restore floor.
//
// A start or resume ends when the Sandbox is Running and envd answers on
// its pod IP. -store=local keeps the data on each node's disk; -store=s3
// gives both node agents one MinIO started for the run. JuiceFS is not
// exercised: no JuiceFS can be installed on these machines, so s3 on
// MinIO stands in for the shared store CubeSandbox measures.
//
//	go run ./test/bench/agent -store=local|s3 [-c 1,5,10] [-n 3] [-json]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/juicefs"
	"github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

// The rows, in the report's order; each is shown per concurrency level.
const (
	mTemplate    = "Template start (base snapshot restore)"
	mSnapAPI     = "Snapshot API"
	mSnapRemote  = "Snapshot remote Ready after API"
	mSnapPut     = "Object store PUT of the snapshot's bytes (floor)"
	mLocalSnap   = "Local snapshot start"
	mPause       = "Pause"
	mPauseGone   = "Pause until its pod is gone"
	mPauseRemote = "Paused package remote Ready after pause"
	mLocalResume = "Local resume"
	mCrossSnap   = "Cross-node snapshot start (cold)"
	mCrossResume = "Cross-node resume"
)

var metrics = []string{mTemplate, mSnapAPI, mSnapRemote, mSnapPut, mLocalSnap, mPause, mPauseGone, mPauseRemote, mLocalResume,
	mPoolResume, mPoolSnap, mCrossSnap, mCrossResume}

// placedOn says, for the rows whose placement is noted, where a sandbox
// should have started.
var placedOn = map[string]string{mLocalSnap: "the snapshot's node", mLocalResume: "the node it was paused on"}

func main() {
	store := flag.String("store", "local", "the node agents' store: local, s3 (a MinIO started for the run) or juicefs (Redis, MinIO and a JuiceFS client per node started for the run)")
	levels := flag.String("c", "1,5,10", "concurrency levels, comma-separated")
	n := flag.Int("n", 3, "rounds at concurrency 1 (a round at C > 1 gives C samples)")
	asJSON := flag.Bool("json", false, "print JSON instead of a table")
	flag.IntVar(prefetch, "juicefs-prefetch", 1, "juicefs: the clients' --prefetch (blocks read ahead concurrently; JuiceFS's default 1, the chart's StorageClass 16)")
	flag.Parse()
	cs, err := sbxbench.ParseLevels("c", *levels)
	if err != nil || (*store != "local" && *store != "s3" && *store != "juicefs") || *n < 1 {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		fmt.Fprintln(os.Stderr, "usage: agent -store=local|s3|juicefs [-c 1,5,10] [-n 3] [-json]")
		os.Exit(2)
	}
	var table stats.Table
	err = crienv.Run("bench-agent", func(t crienv.T) {
		b := newBench(t, *store)
		for _, c := range cs {
			b.level(c, *n)
		}
		b.fill(&table, cs)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *asJSON {
		_ = table.JSON(os.Stdout)
		return
	}
	report(&table, *store)
}

// report prints the table under a header naming what the numbers depend
// on, the ratios the report quotes, and where sandboxes were placed.
func report(table *stats.Table, kind string) {
	store := map[string]string{"local": "local (each node's disk)",
		"s3":      "s3 + MinIO " + minio.Version + " (one for both nodes)",
		"juicefs": "juicefs: JuiceFS " + juicefs.Version + " through its CSI driver (Redis metadata, MinIO " + minio.Version + " objects, a client per node, --writeback, --prefetch=" + strconv.Itoa(*prefetch) + ")"}[kind]
	accel, _ := vm.DetectAccel()
	table.Print(os.Stdout, fmt.Sprintf("sandlot snapshot store: store %s, accel %s, Kubernetes %s, containerd %s, 2 nodes, "+
		"VM 1 vCPU 256 MiB (templates restore their base snapshot), %s",
		store, accel, cluster.K8sVersion, crienv.ContainerdVersion, host.Describe()))
	fmt.Println()
	table.Ratio(os.Stdout, row(mLocalSnap, 1), row(mTemplate, 1))
	table.Ratio(os.Stdout, row(mLocalResume, 1), mFloor)
	table.Ratio(os.Stdout, row(mPoolResume, 1), mFloor)
	table.Ratio(os.Stdout, row(mPoolSnap, 1), mFloor)
	if kind != "local" {
		table.Ratio(os.Stdout, row(mCrossResume, 1), row(mLocalResume, 1))
	}
	if kind == "juicefs" {
		table.Ratio(os.Stdout, row(mSnapRemote, 1), row(mSnapPut, 1))
	}
	for _, r := range table.Results {
		if r.Note != "" {
			fmt.Printf("%s: %s\n", r.Name, r.Note)
		}
	}
}

// row names a measure's cell: the table has one row per metric and level.
func row(metric string, c int) string { return fmt.Sprintf("%s, concurrency %d", metric, c) }

type bench struct {
	t            crienv.T // Fatalf ends the run and the cluster with it: nothing is undone on the way out
	k            client.WithWatch
	shared       bool // s3 or juicefs: the rows across nodes
	objectStore  *minio.Server
	mounts       map[string]string // juicefs: each node's store volume
	nodeA, nodeB string

	mu      sync.Mutex
	seq     int
	samples map[string][]float64 // by row
	placed  map[string][2]int    // by row: started where noted, of all
	floor   []float64            // bare QEMU restores, ms
}

// prefetch is the juicefs clients' --prefetch (-juicefs-prefetch).
var prefetch = new(int)

func newBench(t crienv.T, kind string) *bench {
	// The VM floor first, alone on the cores: what the resumes' ratios
	// are read against.
	floor, err := sbxbench.Floor(5)
	if err != nil {
		t.Fatal(err)
	}
	// The chart's store modes: s3 on the cluster's MinIO, juicefs on a
	// live volume through the JuiceFS CSI driver.
	c, k := sbxbench.StartCluster(t, 2, func(_ string, o *cluster.Options) {
		o.MinIO = kind != "local"
		o.JuiceFSCSI = kind == "juicefs"
		o.ClusterDNS = kind == "juicefs"
		o.JuiceFSMountOptions = []string{"prefetch=" + strconv.Itoa(*prefetch)}
	})
	mounts := map[string]string{}
	for i := 1; kind == "juicefs" && i <= 2; i++ {
		dir, err := c.JuiceFSStoreDir(cluster.NodeName(i))
		if err != nil {
			t.Fatal(err)
		}
		mounts[cluster.NodeName(i)] = dir
	}
	objectStore := c.MinIOServer
	b := &bench{t: t, k: k, shared: kind != "local", objectStore: objectStore, mounts: mounts, nodeA: c.Nodes[0].Name, nodeB: c.Nodes[1].Name,
		samples: map[string][]float64{}, placed: map[string][2]int{}, floor: floor}
	b.template()
	return b
}

func (b *bench) template() {
	env, err := vmtest.LoadEnv()
	if err != nil || env.ImageRef == "" {
		b.t.Fatalf("no default sandbox image (make vm-assets): %v", err)
	}
	tpl := &sandlotv1.Template{ObjectMeta: sbxbench.Meta("bench"),
		Spec: sandlotv1.TemplateSpec{Slots: ptr.To[int32](0), // the paths measured start pods (or claim warm pools)
			Image: env.ImageRef, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256},
			ReadinessProbe: &sandlotv1.ReadinessProbe{HTTPGet: &sandlotv1.HTTPGetProbe{Port: sandlotv1.CodeInterpreterPort, Path: "/health"}}}}
	if err := b.k.Create(context.Background(), tpl); err != nil {
		b.t.Fatal(err)
	}
	// Its base snapshot on both nodes first: the measurements start no build.
	if err := sbxtest.WaitBases(context.Background(), b.k, client.ObjectKeyFromObject(tpl), 2, 5*time.Minute); err != nil {
		b.t.Fatal(err)
	}
}

// level measures every row at concurrency c: n rounds of one sandbox at
// c = 1 (n samples), one round of c sandboxes otherwise (c samples).
func (b *bench) level(c, n int) {
	rounds := 1
	if c == 1 {
		rounds = n
	}
	for r := range rounds {
		b.t.Logf("concurrency %d: round %d of %d", c, r+1, rounds)
		b.local(c)
		if b.shared {
			b.crossSnapshot(c)
			b.crossResume(c)
		}
	}
}

var fromTemplate = sandlotv1.SandboxSource{Template: "bench"}

// local measures 4.1 and 4.2. Pause and resume run on the template's
// sandboxes, which are gone before the snapshots start theirs: at most c
// VMs run at once (2 cores, TCG guests).
func (b *bench) local(c int) {
	srcs, nodes := b.coldStart(c)
	snaps, snapNodes := b.snapshots(c, srcs)
	b.pauseResume(c, srcs, nodes)
	b.poolRows(c, srcs, nodes, snaps, snapNodes) // removes srcs
	kids := b.names("k", c)
	b.add(mLocalSnap, c, b.each(mLocalSnap, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := sbxbench.Start(ctx, b.k, kids[i], sandlotv1.SandboxSource{Snapshot: snaps[i]})
		if err == nil {
			b.tally(mLocalSnap, c, s.Status.NodeName == snapNodes[i])
		}
		return d, err
	})...)
	b.remove(append(sbxbench.Sandboxes(kids), sbxbench.Snapshots(snaps)...)...)
}

// coldStart (4.1) starts c sandboxes of the template (restores of its
// base snapshot) and
// returns their names and nodes.
func (b *bench) coldStart(c int) (names, nodes []string) {
	names, nodes = b.names("t", c), make([]string, c)
	b.add(mTemplate, c, b.each(mTemplate, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := sbxbench.Start(ctx, b.k, names[i], fromTemplate)
		if err == nil {
			nodes[i] = s.Status.NodeName
		}
		return d, err
	})...)
	return names, nodes
}

// snapshots (4.1) snapshots each sandbox once, all at once, and returns
// the snapshots' names and nodes.
func (b *bench) snapshots(c int, srcs []string) (names, nodes []string) {
	names, nodes = b.names("snap", c), make([]string, c)
	b.add(mSnapAPI, c, b.each(mSnapAPI, c, func(ctx context.Context, i int) (time.Duration, error) {
		snap, api, remote, err := b.snapshot(ctx, names[i], srcs[i])
		if err == nil {
			nodes[i] = snap.Status.NodeName
			if b.shared {
				b.add(mSnapRemote, c, stats.MS(remote))
			}
			if c == 1 && b.mounts[snap.Status.NodeName] != "" {
				b.add(mSnapPut, c, stats.MS(b.putFloor(ctx, snap)))
			}
		}
		return api, err
	})...)
	return names, nodes
}

// pauseResume (4.2) pauses running sandboxes, all at once, then resumes
// them; nodes are where they ran.
func (b *bench) pauseResume(c int, names, nodes []string) {
	b.add(mPause, c, b.each(mPause, c, func(ctx context.Context, i int) (time.Duration, error) {
		d, err := b.pause(ctx, names[i])
		if err == nil {
			b.add(mPauseGone, c, stats.MS(d.gone))
		}
		if err == nil && b.shared {
			b.add(mPauseRemote, c, stats.MS(d.remote))
		}
		return d.paused, err
	})...)
	b.add(mLocalResume, c, b.each(mLocalResume, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := b.resume(ctx, names[i])
		if err == nil {
			b.tally(mLocalResume, c, s.Status.NodeName == nodes[i])
		}
		return d, err
	})...)
}

// crossSnapshot (4.3): fresh snapshots of sandboxes on A, remote Ready,
// then A cordoned: sandboxes from them must start on B from data B fetches
// from the store ("cold": no snapshot here was ever restored on B).
func (b *bench) crossSnapshot(c int) {
	srcs := b.onA("xt", c)
	snaps := b.names("xsnap", c)
	b.each("snapshots on "+b.nodeA, c, func(ctx context.Context, i int) (time.Duration, error) {
		_, api, _, err := b.snapshot(ctx, snaps[i], srcs[i]) // waits for remote Ready too
		return api, err
	})
	b.remove(sbxbench.Sandboxes(srcs)...) // only their data is needed: keep c VMs at most
	kids := b.names("xk", c)
	b.cordon(b.nodeA, true)
	samples := b.each(mCrossSnap, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := sbxbench.Start(ctx, b.k, kids[i], sandlotv1.SandboxSource{Snapshot: snaps[i]})
		return d, on(s, err, b.nodeB)
	})
	b.cordon(b.nodeA, false)
	b.add(mCrossSnap, c, samples...)
	b.remove(append(sbxbench.Sandboxes(kids), sbxbench.Snapshots(snaps)...)...)
}

// crossResume (4.4): sandboxes paused on A, their packages remote Ready,
// then A cordoned: the resume must place them on B.
func (b *bench) crossResume(c int) {
	names := b.onA("xr", c)
	b.each("pause on "+b.nodeA, c, func(ctx context.Context, i int) (time.Duration, error) {
		d, err := b.pause(ctx, names[i]) // with a shared store, returns once the package is remote Ready
		return d.paused, err
	})
	b.cordon(b.nodeA, true)
	samples := b.each(mCrossResume, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := b.resume(ctx, names[i])
		return d, on(s, err, b.nodeB)
	})
	b.cordon(b.nodeA, false)
	b.add(mCrossResume, c, samples...)
	b.remove(sbxbench.Sandboxes(names)...)
}

// onA starts c sandboxes of the template on node A, untimed: B is cordoned
// while they are placed, so the cross-node rows know where the data is.
func (b *bench) onA(prefix string, c int) []string {
	names := b.names(prefix, c)
	b.cordon(b.nodeB, true)
	b.each("sandboxes on "+b.nodeA, c, func(ctx context.Context, i int) (time.Duration, error) {
		s, d, err := sbxbench.Start(ctx, b.k, names[i], fromTemplate)
		return d, on(s, err, b.nodeA)
	})
	b.cordon(b.nodeB, false)
	return names
}

// on fails a start that succeeded on the wrong node.
func on(s *sandlotv1.Sandbox, err error, node string) error {
	if err == nil && s.Status.NodeName != node {
		err = fmt.Errorf("sandbox %s runs on %s, want %s", s.Name, s.Status.NodeName, node)
	}
	return err
}

// each runs job for 0..n-1 at once (stats.Concurrently) and returns the
// durations the jobs report. Any error fails the run here, on the run's
// goroutine: Fatalf from a job's goroutine would skip the cleanups.
func (b *bench) each(what string, n int, job func(ctx context.Context, i int) (time.Duration, error)) []float64 {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	samples, _, _, errs := stats.Concurrently(n, func() (time.Duration, func(), error) {
		d, err := job(ctx, <-next)
		return d, nil, err
	})
	if len(errs) > 0 {
		b.t.Fatalf("%s: %v", what, errs)
	}
	return samples
}

// names are fresh object names: no round meets a previous one's leftovers.
func (b *bench) names(prefix string, c int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, c)
	for i := range out {
		b.seq++
		out[i] = fmt.Sprintf("%s-%d", prefix, b.seq)
	}
	return out
}

func (b *bench) add(metric string, c int, ms ...float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.samples[row(metric, c)] = append(b.samples[row(metric, c)], ms...)
}

// tally counts whether a sandbox started where placedOn says it should.
func (b *bench) tally(metric string, c int, there bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.placed[row(metric, c)]
	p[1]++
	if there {
		p[0]++
	}
	b.placed[row(metric, c)] = p
}

// fill adds the rows metric by metric, each at every level: the report's
// table with concurrency spelled out in the row. Rows without samples
// (the shared-store ones with the local store) are left out.
func (b *bench) fill(t *stats.Table, levels []int) {
	t.Add(mFloor, "ms", b.floor, "bench-vm -floor, this run, before the cluster started (256 MiB VM)")
	for _, m := range metrics {
		for _, c := range levels {
			note := ""
			if p, ok := b.placed[row(m, c)]; ok {
				note = fmt.Sprintf("%d of %d started on %s", p[0], p[1], placedOn[m])
			}
			t.Add(row(m, c), "ms", b.samples[row(m, c)], note)
		}
	}
}
