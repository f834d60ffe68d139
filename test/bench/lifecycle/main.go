// Command lifecycle benchmarks a sandbox's lifecycle through the
// Kubernetes API on a real one-node cluster on this machine (so density is
// per node), in the shape of CubeSandbox's seed report (3.2's concurrency
// table, 3.3 density, 4.4 rollback, 4.5 clone). Its rows:
//
//   - Create from template, concurrency C: C Sandboxes of the template
//     created at once, each a restore of the template's base snapshot
//     (built before any measurement); C = 1 is the run's baseline;
//   - Create from warm pool, concurrency C: the same with spec.warmPool = C
//     and the pool full (it refills during the batch, as in use), noting
//     how many claimed a pool pod; levels above -poolmax are skipped;
//   - Fork, N children: N Sandboxes from one Snapshot of a parent, each
//     and the batch's wall time, and Fork: parent paused (how long the
//     snapshot paused the parent's VM); the parent is gone before the
//     children start, which need only its data;
//   - Fork into warm pool pods, N children: the same with a warm pool of N
//     filled first, each child restored into a pool pod in place (no pod
//     starts), noting how many did;
//   - Rollback, concurrency R: R running sandboxes rolled back in place at
//     once, each to its own snapshot, until the node agent reports it done;
//   - Host memory and QEMU PSS per live sandbox, D sandboxes: D idle
//     sandboxes forked from one snapshot, started 10 at a time;
//   - Host memory and QEMU PSS per paused clone, D clones: a warm pool of
//     D, each VM restored from the base snapshot and paused — at counts
//     where D running TCG guests would saturate the two cores.
//
// A create ends when the Sandbox is Running and envd answers on its pod IP.
// The create, fork and rollback batches also get 3.2's columns: avg,
// per-sandbox amortised (wall / C) and throughput (C / wall). Everything
// is deleted between rows, outside every measurement. The RuntimeClass's
// per-pod overhead is dropped for the run (see zeroOverhead); a level
// whose VMs' memory requests exceed the node's is skipped with a note.
// The VM floor, the bare QEMU restore without Kubernetes (bench-vm
// -floor), is measured first in the same run, for the ratios.
//
// Not exercised: figures hold for the header's accel only (TCG on these
// machines: never read them as KVM); a second node or a remote store,
// and pause/resume (bench-agent); the E2B API and proxy (bench-e2b; the
// pod IP is asked directly here); a guest doing work: density measures idle guests, and a
// rollback ends with the agent's report, not envd's next answer.
//
//	go run ./test/bench/lifecycle [-c 1,10,20,50] [-forks 1,100] [-pool-forks 1,100] [-rollbacks 1,5,10]
//	    [-density 20,50] [-paused-density 50,100] [-mem 192] [-poolmax 20] [-json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

// Row names; the table has one row per name and level.
func rowTemplate(c int) string { return fmt.Sprintf("Create from template, concurrency %d", c) }
func rowPool(c int) string     { return fmt.Sprintf("Create from warm pool, concurrency %d", c) }
func rowFork(n int) string     { return fmt.Sprintf("Fork, %d children", n) }
func rowForkPool(n int) string { return fmt.Sprintf("Fork into warm pool pods, %d children", n) }
func rowRollback(r int) string { return fmt.Sprintf("Rollback, concurrency %d", r) }
func rowHostMem(d int) string  { return fmt.Sprintf("Host memory per live sandbox, %d sandboxes", d) }
func rowPSS(d int) string      { return fmt.Sprintf("QEMU PSS per live sandbox, %d sandboxes", d) }
func rowShimPSS(d int) string  { return fmt.Sprintf("shim PSS per live sandbox, %d sandboxes", d) }
func rowPausedMem(d int) string {
	return fmt.Sprintf("Host memory per paused clone, %d clones (warm pool)", d)
}
func rowPausedPSS(d int) string {
	return fmt.Sprintf("QEMU PSS per paused clone, %d clones (warm pool)", d)
}

const rowParentPaused = "Fork: parent paused"

// tplName is the one template every row uses.
const tplName = "bench"

type levels struct {
	creates, forks, poolForks, rollbacks, density []int
	pausedDensity                                 []int
	poolMax                                       int
}

func main() {
	var l levels
	cs := flag.String("c", "1,10,20,50", "create concurrency levels (template and warm pool)")
	forks := flag.String("forks", "1,100", "children per fork batch")
	poolForks := flag.String("pool-forks", "1,100", "children per fork batch into a warm pool of as many pods")
	rbs := flag.String("rollbacks", "1,5,10", "rollback concurrency levels")
	dens := flag.String("density", "20,50", "running sandboxes per density level")
	pdens := flag.String("paused-density", "50,100", "paused clones (a warm pool) per density level")
	mem := flag.Int("mem", 192, "VM memory in MiB")
	flag.IntVar(&l.poolMax, "poolmax", 20, "largest warm pool measured (each pool VM holds its memory)")
	asJSON := flag.Bool("json", false, "print JSON instead of tables")
	flag.Parse()
	var errs []error
	for _, p := range []struct {
		name, s string
		to      *[]int
	}{{"c", *cs, &l.creates}, {"forks", *forks, &l.forks}, {"pool-forks", *poolForks, &l.poolForks}, {"rollbacks", *rbs, &l.rollbacks}, {"density", *dens, &l.density}, {"paused-density", *pdens, &l.pausedDensity}} {
		var err error
		*p.to, err = sbxbench.ParseLevels(p.name, p.s)
		errs = append(errs, err)
	}
	if err := firstErr(errs); err != nil || *mem < 64 {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		fmt.Fprintln(os.Stderr, "usage: lifecycle [-c 1,10,20,50] [-forks 1,100] [-pool-forks 1,100] [-rollbacks 1,5,10] [-density 20,50] [-paused-density 50,100] [-mem 192] [-poolmax 20] [-json]")
		os.Exit(2)
	}
	var b *bench
	err := crienv.Run("bench-lifecycle", func(t crienv.T) {
		b = newBench(t, *mem, slices.Max(append([]int{0}, l.density...)), batchFloors(l))
		b.run(l)
	})
	if err != nil {
		// A failure late in a long run keeps the rows measured before it.
		if b != nil && len(b.table.Results) > 0 {
			b.report(os.Stdout, *asJSON)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b.report(os.Stdout, *asJSON)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

type bench struct {
	t           crienv.T // Fatalf ends the run and the cluster with it: nothing is undone on the way out
	k           client.WithWatch
	node        string
	clusterDir  string // every QEMU of this cluster names a path under it
	mem         int
	allocMiB    int64 // the node's allocatable memory and pods: what placement admits
	maxPods     int64
	overheadMiB int64 // the RuntimeClass's memory overhead per pod

	table   stats.Table
	batches []stats.Batch
	skipped []string
	paused  []float64 // ms, one per fork level

	batchFloors []int // fork batch sizes with a concurrent-restore floor

	mu  sync.Mutex
	seq int
}

// batchFloors are the fork batches of more than one child: each is read
// against as many bare restores at once.
func batchFloors(l levels) []int {
	var out []int
	for _, n := range append(slices.Clone(l.forks), l.poolForks...) {
		if n > 1 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func newBench(t crienv.T, mem, clones int, batches []int) *bench {
	// The VM floor first, alone on the cores: the raw restore every
	// create's ratio is read against, bare clones at the largest density
	// level, what a sandbox's memory is read against, and as many bare
	// restores at once as each fork batch has children.
	floor, err := sbxbench.FloorRows(5, clones, batches...)
	if err != nil {
		t.Fatal(err)
	}
	c, k := sbxbench.StartCluster(t, 1, nil)
	b := &bench{t: t, k: k, node: c.Nodes[0].Name, clusterDir: c.Dir, mem: mem, batchFloors: batches}
	b.table.Add(sbxbench.FloorRow, "ms", floor[sbxbench.FloorRow], "bench-vm -floor, this run, before the cluster started (256 MiB VM)")
	for _, n := range batches {
		b.table.Add(sbxbench.FloorConcurrentRow(n), "ms", floor[sbxbench.FloorConcurrentRow(n)],
			"bench-vm -floor -floor-concurrent, this run, before the cluster started (256 MiB VM)")
	}
	if clones > 0 {
		b.table.Add(fmt.Sprintf("%s, %d clones", sbxbench.FloorDensityRow, clones), "MiB", floor[sbxbench.FloorDensityRow],
			"bench-vm -floor -floor-clones, this run, before the cluster started: bare QEMU clones of a 256 MiB guest, idle 3 s")
	}
	b.zeroOverhead()
	b.capacity()
	b.template()
	return b
}

// zeroOverhead: see sbxbench.ZeroOverhead.
func (b *bench) zeroOverhead() {
	if err := sbxbench.ZeroOverhead(context.Background(), b.k); err != nil {
		b.t.Fatal(err)
	}
}

// capacity reads what the node admits, so levels that cannot be placed
// are skipped instead of waiting out the timeout.
func (b *bench) capacity() {
	n := &corev1.Node{}
	if err := b.k.Get(context.Background(), client.ObjectKey{Name: b.node}, n); err != nil {
		b.t.Fatal(err)
	}
	b.allocMiB = n.Status.Allocatable.Memory().Value() >> 20
	b.maxPods = n.Status.Allocatable.Pods().Value()
	overhead, err := sbxbench.OverheadMiB(context.Background(), b.k)
	if err != nil {
		b.t.Fatal(err)
	}
	b.overheadMiB = overhead
}

// fits says why pods VMs of -mem MiB (and the RuntimeClass's memory
// overhead each) cannot all be placed on the node, or "".
func (b *bench) fits(pods int) string {
	switch need := int64(pods) * (int64(b.mem) + b.overheadMiB); {
	case need > b.allocMiB:
		return fmt.Sprintf("%d VMs request %d MiB, the node has %d MiB allocatable", pods, need, b.allocMiB)
	case int64(pods) > b.maxPods:
		return fmt.Sprintf("%d pods, the node admits %d", pods, b.maxPods)
	}
	return ""
}

func (b *bench) skip(row, why string) {
	b.t.Logf("%s: skipped: %s", row, why)
	b.skipped = append(b.skipped, row+": skipped: "+why)
}

func (b *bench) template() {
	env, err := vmtest.LoadEnv()
	if err != nil || env.ImageRef == "" {
		b.t.Fatalf("no default sandbox image (make vm-assets): %v", err)
	}
	tpl := &sandlotv1.Template{ObjectMeta: sbxbench.Meta(tplName),
		Spec: sandlotv1.TemplateSpec{Slots: ptr.To[int32](0), // the paths measured start pods (or claim warm pools)
			Image: env.ImageRef, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: int32(b.mem)},
			ReadinessProbe: &sandlotv1.ReadinessProbe{HTTPGet: &sandlotv1.HTTPGetProbe{Port: sandlotv1.CodeInterpreterPort, Path: "/health"}}}}
	if err := b.k.Create(context.Background(), tpl); err != nil {
		b.t.Fatal(err)
	}
	// Its base snapshot first, and its builder gone: the measurements
	// start no build and share the node with nothing.
	if err := sbxtest.WaitBases(context.Background(), b.k, client.ObjectKeyFromObject(tpl), 1, waitTimeout); err != nil {
		b.t.Fatal(err)
	}
	b.remove()
}

// run measures the rows in the report's order.
func (b *bench) run(l levels) {
	for _, c := range l.creates {
		b.fromTemplate(c)
	}
	for _, c := range l.creates {
		b.fromPool(c, l.poolMax)
	}
	for _, n := range l.forks {
		b.fork(n)
	}
	for _, n := range l.poolForks {
		b.forkIntoPool(n)
	}
	b.table.Add(rowParentPaused, "ms", b.paused, "the parent VM's pause for the snapshot of each fork level (status.sourcePausedMicroseconds)")
	for _, r := range l.rollbacks {
		b.rollbackLevel(r)
	}
	b.densities(l.density)
	for _, d := range l.pausedDensity {
		b.pausedDensity(d)
	}
}

// record adds a concurrent batch to the table and to the batch columns.
func (b *bench) record(name string, samples []float64, wall time.Duration, note string) {
	if len(samples) == 0 {
		return
	}
	b.batches = append(b.batches, b.table.AddBatch(name, samples, len(samples), 0, wall, note))
}

func (b *bench) header() string {
	accel, _ := vm.DetectAccel()
	return fmt.Sprintf("sandlot lifecycle: accel %s, Kubernetes %s, containerd %s, 1 node, VM 1 vCPU %d MiB "+
		"(template sandboxes restore its base snapshot; RuntimeClass CPU overhead dropped for the run), %s",
		accel, cluster.K8sVersion, crienv.ContainerdVersion, b.mem, host.Describe())
}

// report prints the table, the batches in section 3.2's columns, the
// warm pool's gain over the template start, and the notes.
func (b *bench) report(w io.Writer, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"header": b.header(), "results": b.table.Results, "batches": b.batches, "skipped": b.skipped})
		return
	}
	b.table.Print(w, b.header())
	fmt.Fprintln(w)
	stats.PrintBatches(w, b.batches)
	fmt.Fprintln(w)
	if pool, tpl := rowPool(1), rowTemplate(1); b.table.Median(tpl) > 0 {
		fmt.Fprintf(w, "baseline: %s, the template start (base snapshot restore), and the VM floor (bare QEMU restore, this run)\n", tpl)
		b.table.Ratio(w, tpl, sbxbench.FloorRow)
		if b.table.Median(pool) > 0 {
			b.table.Ratio(w, pool, tpl)
			b.table.Ratio(w, pool, sbxbench.FloorRow)
		}
	}
	for _, n := range b.batchFloors {
		for _, row := range []string{rowFork(n), rowForkPool(n)} {
			if b.table.Median(row+": batch wall time") > 0 {
				b.table.Ratio(w, row+": batch wall time", sbxbench.FloorConcurrentRow(n))
			}
		}
	}
	for _, r := range b.table.Results {
		if r.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Name, r.Note)
		}
	}
	for _, s := range b.skipped {
		fmt.Fprintln(w, s)
	}
}

// names are fresh object names: no row meets a previous one's leftovers.
func (b *bench) names(prefix string, n int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, n)
	for i := range out {
		b.seq++
		out[i] = fmt.Sprintf("%s-%d", prefix, b.seq)
	}
	return out
}
