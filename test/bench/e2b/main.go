// Command e2b benchmarks what an E2B SDK user waits for through
// sandlot-api, the E2B REST facade, in the shape of CubeSandbox's
// cube-bench (the seed report's section 3.2): -c workers drive -n starts
// per level, after -w warm-up starts, in mode create-only (the sandboxes
// stay alive until the level ends) or create-delete (each worker deletes
// what it created through DELETE /sandboxes/{id}).
//
// A start is the SDK's Sandbox.create() and then its first
// sandbox.commands.run('true'): POST /v2/sandboxes, timed until its 201
// (which sandlot-api answers once the VM is ready), then a Connect
// process.Process/Start of `/bin/sh -c true` sent to sandlot-api's URL
// with the headers of the SDK's sandbox-url mode (E2b-Sandbox-Id,
// E2b-Sandbox-Port 49983, X-Access-Token: the 201's envdAccessToken), which
// the API's proxy forwards to the sandbox's envd; timed from the create's
// request until the command's end event says exit code 0. A failed create
// or first command is counted in its level's failures and reported, never
// taken as a sample, and the run goes on.
//
// Each level runs without a started pod (the template's spec.slots 0: each
// create starts its pod), with min(n, -poolmax) start slots per node (pods
// with no VM that a create restores into) and with a warm pool of that many
// VMs per node (each full before the level starts; they refill during the
// level, as in use).
//
// The floor (package test/bench/bare), in the same run under the same
// background: a bare QEMU restore of a snapshot of the default sandbox
// image's rootfs (1 vCPU, 256 MiB), then the same command sent straight to
// the guest's envd (its port forwarded by QEMU's user-mode network, no
// token), timed from QEMU's exec until the end event. It includes the QEMU
// process start, the device state's incoming migration, cont, the guest's
// first run after the restore (under TCG, translating its code anew) and
// the command (a Connect request into the guest, a process started there).
// It excludes all that sandlot adds: the Kubernetes objects, controller and
// node agent, pod and shim, the jail, the snapshot's checks, the identity
// push, the pod network, sandlot-api and its proxy — and the copy of the
// writable disk (made before the clock). Its samples are taken before each
// level, the cluster up and idle (the level before cleaned up, no warm pool
// or slots yet): -floor-n restores one after the other before a c = 1
// level, -floor-n batches of c restores at once before a c > 1 level (each
// restore's time, and each batch's rate: c concurrent floors).
//
// Printed: every measure's table (with each level's hops and its 201 ->
// first command); cube-bench's columns (avg, min, p95, max, amortised =
// wall / n, per s = successes / wall) for each level's 201 and first
// command; and per level against the floor and issue 34's targets: the
// create -> 201 and create -> first command medians, the floor's median
// (at c > 1: each of c restores at once) and first command / floor (target
// <= 1.5x with a warm pool, <= 2x without); at c > 1 the first commands
// answered per second against c concurrent floors' (target at c = 10:
// >= 0.5x).
//
// On one node of a real cluster on this machine; every figure holds for
// the accel in the header only (TCG on these machines).
//
//	go run ./test/bench/e2b [-c 1,10,20,50] [-n 0] [-w 3] [-m create-only,create-delete]
//	    [-pool without,slots,with] [-poolmax 20] [-floor-n 3] [-builds 3] [-json]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

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

const (
	tplName     = "default" // what the SDKs' default template IDs resolve to
	waitTimeout = 10 * time.Minute
)

type options struct {
	levels       []int
	n, warm      int
	modes, pools []string
	poolMax      int
	floorN       int
	builds       int
	asJSON       bool
}

const usage = "usage: e2b [-c 1,10,20,50] [-n 0] [-w 3] [-m create-only,create-delete] [-pool without,slots,with] " +
	"[-poolmax 20] [-floor-n 3] [-builds 3] [-json]"

func main() {
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var b *bench
	err = crienv.Run("bench-e2b", func(t crienv.T) {
		b = &bench{t: t}
		b.prepareFloor() // first: a broken floor stops the run before the cluster's minutes
		b.setup()
		b.run(o)
		b.builds(o.builds)
	})
	if b != nil && (len(b.batches) > 0 || len(b.table.Results) > 0) {
		b.report(os.Stdout, o.asJSON) // a failure late in the run keeps the rows before it
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func parseFlags() (options, error) {
	var o options
	cs := flag.String("c", "1,10,20,50", "concurrency levels (workers)")
	flag.IntVar(&o.n, "n", 0, "starts per level (0: 10 at c = 1, else c)")
	flag.IntVar(&o.warm, "w", 3, "warm-up starts (create, first command, delete) before each mode, not counted")
	modes := flag.String("m", "create-only,create-delete", "modes: create-only, create-delete")
	pools := flag.String("pool", "without,slots,with", "started pods: without, slots (start slots), with (warm pool)")
	flag.IntVar(&o.poolMax, "poolmax", 20, "largest warm pool or start slots (each pool VM holds its memory)")
	flag.IntVar(&o.floorN, "floor-n", 3, "floor samples before each level: restores at c = 1, batches of c at once at c > 1")
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
	if err == nil && (o.n < 0 || o.warm < 0 || o.floorN < 1) {
		err = fmt.Errorf("-n and -w must be at least 0, -floor-n at least 1")
	}
	return o, err
}

type bench struct {
	t       crienv.T
	k       client.WithWatch
	node    string
	api     string
	key     string
	table   stats.Table
	batches []stats.Batch
	levels  []levelStat // each level's figures, for the summary
	floor   *floor
	hops    *hops // the level running, if any
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
	b.warmFloor()
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
				b.sampleFloor(c, o.floorN)
				b.level(mode, pool, c, n, o.poolMax)
			}
		}
	}
}

// warmUp starts (create, first command) and deletes w sandboxes one by
// one, uncounted. A failed first command is logged: the levels count
// theirs.
func (b *bench) warmUp(w int) {
	for range w {
		c, err := b.create()
		if err != nil {
			b.t.Fatalf("warm-up: %v", err)
		}
		if err := b.firstCommand(c.id, c.token); err != nil {
			b.t.Logf("warm-up: first command in %s: %v", c.id, err)
		}
		if _, err := b.kill(c.id); err != nil {
			b.t.Fatalf("warm-up: %v", err)
		}
	}
	b.settle()
}

func (b *bench) header() string {
	accel, _ := vm.DetectAccel()
	return fmt.Sprintf("sandlot-api (E2B REST) create and first command: accel %s, Kubernetes %s, containerd %s, 1 node, "+
		"VM 1 vCPU 256 MiB (template base snapshot restore; RuntimeClass overhead zeroed for the run), %s",
		accel, cluster.K8sVersion, crienv.ContainerdVersion, host.Describe())
}
