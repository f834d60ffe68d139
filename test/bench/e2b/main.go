// Command e2b benchmarks sandbox creation through sandlot-api, the E2B
// REST facade, in the shape of CubeSandbox's cube-bench (the seed
// report's section 3.2): -c workers drive -n requests per level against
// POST /v2/sandboxes, after -w warm-up creates, in mode create-only (the
// sandboxes stay alive until the level ends) or create-delete (each
// worker deletes what it created through DELETE /sandboxes/{id}). A
// create is timed from the request until its 201, which sandlot-api
// answers once the VM is ready. Each level runs without a started pod
// (the template's spec.slots 0: each create starts its pod), with
// min(n, -poolmax) start slots per node (pods with no VM that a create
// restores into) and with a warm pool of that many VMs per node (each
// full before the level starts; they refill during the level, as in use).
//
// Columns as cube-bench prints them: avg, min, p95, max, per-sandbox
// amortised (level wall time / n) and throughput (n / wall). The floor,
// measured in the same run before the cluster starts: the raw QEMU
// restore of a snapshot to the guest's first answer (bench-vm -floor),
// and the ratio of the create median at c = 1 to it.
//
// On one node of a real cluster on this machine; every figure holds for
// the accel in the header only (TCG on these machines).
//
//	go run ./test/bench/e2b [-c 1,10,20,50] [-n 0] [-w 3] [-m create-only,create-delete]
//	    [-pool without,slots,with] [-poolmax 20] [-json]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	"github.com/sandlot-dev/sandlot/test/cluster"
	"github.com/sandlot-dev/sandlot/test/crienv"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

const (
	tplName     = "default" // what the SDKs' default template IDs resolve to
	waitTimeout = 10 * time.Minute
	floorRow    = sbxbench.FloorRow
)

type options struct {
	levels       []int
	n, warm      int
	modes, pools []string
	poolMax      int
	builds       int
	asJSON       bool
}

func main() {
	var o options
	cs := flag.String("c", "1,10,20,50", "concurrency levels (workers)")
	flag.IntVar(&o.n, "n", 0, "requests per level (0: 10 at c = 1, else c)")
	flag.IntVar(&o.warm, "w", 3, "warm-up creates before each mode, not counted")
	modes := flag.String("m", "create-only,create-delete", "modes: create-only, create-delete")
	pools := flag.String("pool", "without,slots,with", "started pods: without, slots (start slots), with (warm pool)")
	flag.IntVar(&o.poolMax, "poolmax", 20, "largest warm pool or start slots (each pool VM holds its memory)")
	flag.IntVar(&o.builds, "builds", 3, "template builds (and as many cached rebuilds and by-hand runs); 0: none")
	flag.BoolVar(&o.asJSON, "json", false, "print JSON instead of tables")
	flag.Parse()
	var err error
	o.levels, err = sbxbench.ParseLevels("c", *cs)
	o.modes, o.pools = strings.Split(*modes, ","), strings.Split(*pools, ",")
	for _, m := range o.modes {
		if m != "create-only" && m != "create-delete" {
			err = fmt.Errorf("-m: %q is neither create-only nor create-delete", m)
		}
	}
	for _, p := range o.pools {
		if p != "without" && p != "slots" && p != "with" {
			err = fmt.Errorf("-pool: %q is not without, slots or with", p)
		}
	}
	if err != nil || o.n < 0 || o.warm < 0 {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "usage: e2b [-c 1,10,20,50] [-n 0] [-w 3] [-m create-only,create-delete] [-pool without,slots,with] [-poolmax 20] [-json]")
		os.Exit(2)
	}
	var b *bench
	err = crienv.Run("bench-e2b", func(t crienv.T) {
		b = &bench{t: t}
		b.floor(o.levels)
		b.setup()
		b.run(o)
		b.builds(o.builds)
	})
	if b != nil && (len(b.batches) > 0 || len(b.table.Results) > 1) {
		b.report(os.Stdout, o.asJSON) // a failure late in the run keeps the rows before it
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type bench struct {
	t       crienv.T
	k       client.WithWatch
	node    string
	api     string
	key     string
	table   stats.Table
	batches []stats.Batch
	hops    *hops // the level running, if any
}

// floor measures the bare QEMU restore before the cluster starts, and as
// many bare restores at once as each concurrency level above 1 has.
func (b *bench) floor(levels []int) {
	var batches []int
	for _, c := range levels {
		if c > 1 {
			batches = append(batches, c)
		}
	}
	rows, err := sbxbench.FloorRows(5, 0, batches...)
	if err != nil {
		b.t.Fatal(err)
	}
	b.table.Add(floorRow, "ms", rows[floorRow], "bench-vm -floor, this run, before the cluster started")
	for _, c := range batches {
		b.table.Add(sbxbench.FloorConcurrentRow(c), "ms", rows[sbxbench.FloorConcurrentRow(c)],
			"bench-vm -floor -floor-concurrent, this run, before the cluster started")
	}
}

// throughputRatio prints a batch's creates/s against the rate of as many
// bare restores at once (the floor of its concurrency level).
func (b *bench) throughputRatio(w io.Writer, bt stats.Batch) {
	_, level, ok := strings.Cut(bt.Name, ", c=")
	c, err := strconv.Atoi(level)
	wall := b.table.Median(sbxbench.FloorConcurrentRow(c))
	if !ok || err != nil || c < 2 || wall <= 0 {
		return
	}
	floorRate := float64(c) / wall * 1000
	fmt.Fprintf(w, "%s: %.2f creates/s = %.2fx the rate of %d bare restores at once (%.2f/s)\n",
		bt.Name, bt.PerSecond, bt.PerSecond/floorRate, c, floorRate)
}

// setup starts a one-node cluster, the default template (its base
// snapshot built) and sandlot-api with a key.
func (b *bench) setup() {
	// The chart's API: the default template is the bench's, and no create
	// rate limit (the benchmark measures creates, not the limit).
	c, k := sbxbench.StartCluster(b.t, 1, func(_ string, o *cluster.Options) {
		o.Values = map[string]any{"api": map[string]any{"defaultTemplate": tplName,
			"createRateLimit": map[string]any{"perSecond": 0}}}
	})
	b.k, b.node = k, c.Nodes[0].Name
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := sbxbench.ZeroOverhead(ctx, k); err != nil {
		b.t.Fatal(err)
	}
	env, err := vmtest.LoadEnv()
	if err != nil || env.ImageRef == "" {
		b.t.Fatalf("no default sandbox image (make vm-assets): %v", err)
	}
	tpl := &sandlotv1.Template{ObjectMeta: sbxbench.Meta(tplName),
		Spec: sandlotv1.TemplateSpec{Image: env.ImageRef, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256},
			Slots: ptr.To[int32](0)}} // the "slots" levels set them
	if err := k.Create(ctx, tpl); err != nil {
		b.t.Fatal(err)
	}
	if err := sbxtest.WaitBases(ctx, k, client.ObjectKeyFromObject(tpl), 1, waitTimeout); err != nil {
		b.t.Fatal(err)
	}
	if err := sbxbench.NoPods(ctx, k); err != nil { // the builder gone
		b.t.Fatal(err)
	}
	if b.key, err = c.IssueAPIKey(ctx); err != nil {
		b.t.Fatal(err)
	}
	if b.api, err = c.APIURL(ctx); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bench) run(o options) {
	for _, pool := range o.pools {
		for _, mode := range o.modes {
			b.warmUp(o.warm)
			for _, c := range o.levels {
				n := o.n
				switch {
				case n == 0 && c == 1:
					n = 10
				case n == 0:
					n = c
				}
				b.level(mode, pool, c, n, o.poolMax)
			}
		}
	}
}

// warmUp creates and deletes w sandboxes one by one, uncounted.
func (b *bench) warmUp(w int) {
	for range w {
		id, _, err := b.create()
		if err != nil {
			b.t.Fatalf("warm-up: %v", err)
		}
		if _, err := b.kill(id); err != nil {
			b.t.Fatalf("warm-up: %v", err)
		}
	}
	b.settle()
}

// level runs n requests on c workers and records the batch; pool says
// which pods are started before it: none, start slots or a warm pool.
func (b *bench) level(mode, pool string, c, n, poolMax int) {
	name := fmt.Sprintf("%s, %s, c=%d", mode, poolNames[pool], c)
	size := 0
	if pool != "without" {
		size = min(n, poolMax)
		b.setPool(pool, size)
	}
	h, err := watchHops(b.k, sbxbench.Meta(tplName).Namespace)
	if err != nil {
		b.t.Fatal(err)
	}
	b.hops = h
	began := time.Now()
	r := b.runWorkers(mode, c, n)
	wall := time.Since(began)
	b.hops = nil
	h.stop(&b.table, name)
	note := ""
	if size > 0 {
		note = fmt.Sprintf("%d per node, full at the start", size)
	}
	if r.firstErr != nil {
		note = strings.TrimPrefix(note+"; first error: "+r.firstErr.Error(), "; ")
	}
	b.record(name, r.creates, n, r.failed, wall, note)
	if len(r.deletes) > 0 {
		b.table.Add(name+": delete", "ms", r.deletes, "")
	}
	for _, id := range r.ids {
		if _, err := b.kill(id); err != nil {
			b.t.Fatalf("cleanup: %v", err)
		}
	}
	if size > 0 {
		b.setPool(pool, 0)
	}
	b.settle()
}

// poolNames name the levels' started pods in the table.
var poolNames = map[string]string{"without": "without warm pool", "slots": "start slots", "with": "with warm pool"}

// levelResult is what one level's workers measured.
type levelResult struct {
	creates, deletes []float64
	ids              []string // created and not deleted: cleaned up after the level
	failed           int
	firstErr         error
}

// runWorkers runs n creates (each followed by its delete in
// create-delete mode) on c workers.
func (b *bench) runWorkers(mode string, c, n int) levelResult {
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	var (
		mu sync.Mutex
		r  levelResult
		wg sync.WaitGroup
	)
	for range c {
		wg.Go(func() {
			for range jobs {
				id, d, err := b.create()
				var kd time.Duration
				if err == nil && mode == "create-delete" {
					kd, err = b.kill(id)
					id = ""
				}
				mu.Lock()
				r.add(id, d, kd, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return r
}

func (r *levelResult) add(id string, create, kill time.Duration, err error) {
	if err != nil {
		r.failed++
		r.firstErr = cmpErr(r.firstErr, err)
	} else {
		r.creates = append(r.creates, stats.MS(create))
		if kill > 0 {
			r.deletes = append(r.deletes, stats.MS(kill))
		}
	}
	if id != "" {
		r.ids = append(r.ids, id)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// create is POST /v2/sandboxes with the SDK's default template ID.
func (b *bench) create() (string, time.Duration, error) {
	start := time.Now()
	code, body, err := b.call(http.MethodPost, "/v2/sandboxes", `{"templateID":"base","timeout":3600}`)
	answered := time.Now()
	d := answered.Sub(start)
	if err != nil {
		return "", 0, err
	}
	if code != http.StatusCreated {
		return "", 0, fmt.Errorf("create: %d %s", code, body)
	}
	var s struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(body, &s); err != nil || s.SandboxID == "" {
		return "", 0, fmt.Errorf("create: no sandboxID in %s", body)
	}
	if b.hops != nil {
		b.hops.request(s.SandboxID, start, answered)
	}
	return s.SandboxID, d, nil
}

// kill is DELETE /sandboxes/{id}.
func (b *bench) kill(id string) (time.Duration, error) {
	start := time.Now()
	code, body, err := b.call(http.MethodDelete, "/sandboxes/"+id, "")
	if err == nil && code != http.StatusNoContent {
		err = fmt.Errorf("delete %s: %d %s", id, code, body)
	}
	return time.Since(start), err
}

var httpClient = &http.Client{Timeout: waitTimeout, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 100}}

func (b *bench) call(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, b.api+path, bytes.NewBufferString(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-API-KEY", b.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func (b *bench) setPool(pool string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	set := sbxbench.SetPool
	if pool == "slots" {
		set = sbxbench.SetSlots
	}
	if err := set(ctx, b.k, tplName, n, b.node); err != nil {
		b.t.Fatal(err)
	}
}

// settle waits until every sandlot pod is gone between levels.
func (b *bench) settle() {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := sbxbench.Remove(ctx, b.k); err != nil {
		b.t.Fatalf("cleanup: %v", err)
	}
}

func (b *bench) record(name string, samples []float64, n, failed int, wall time.Duration, note string) {
	b.batches = append(b.batches, b.table.AddBatch(name, samples, n, failed, wall, note))
}

func (b *bench) header() string {
	accel, _ := vm.DetectAccel()
	return fmt.Sprintf("sandlot-api (E2B REST) create: accel %s, Kubernetes %s, containerd %s, 1 node, VM 1 vCPU 256 MiB "+
		"(template base snapshot restore; RuntimeClass overhead zeroed for the run), %s",
		accel, cluster.K8sVersion, crienv.ContainerdVersion, host.Describe())
}

func (b *bench) report(w io.Writer, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"header": b.header(), "results": b.table.Results, "batches": b.batches,
			"at": time.Now().UTC().Format(time.RFC3339)})
		return
	}
	b.table.Print(w, b.header())
	fmt.Fprintln(w)
	stats.PrintBatches(w, b.batches)
	fmt.Fprintln(w)
	for _, bt := range b.batches {
		if strings.HasSuffix(bt.Name, ", c=1") {
			b.table.Ratio(w, bt.Name, floorRow)
		}
		b.throughputRatio(w, bt)
	}
	b.table.Ratio(w, rowBuild, rowByHand)
	b.table.Ratio(w, rowCached, rowByHand)
	b.table.Ratio(w, rowStep3, rowBuild)
	for _, r := range b.table.Results {
		if r.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Name, r.Note)
		}
	}
}
