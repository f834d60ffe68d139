// Command vm benchmarks the VM layer on real QEMU (make bench-vm): cold
// boot, snapshots, restore to the guest's first answer (single and
// concurrent), pause/resume, an idle guest's CPU and memory per clone —
// with the floor, the bare QEMU restore sequence without sandlot's layer,
// measured in the same run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

type bench struct {
	env   vmtest.Env
	dir   string
	accel string
	n     int
	// floorOnly stops after the restores (bench-e2b's floor).
	floorOnly bool
	// floorClones, with floorOnly, adds the bare clones' density at that
	// many clones (bench-lifecycle's density floor).
	floorClones int
	// floorConcurrent, with floorOnly, adds n bare restores at once for
	// each n (the floor of a batch of n starts).
	floorConcurrent []int
	// floorSnap is the snapshot bare QEMU restores.
	floorSnap string
	stats.Table
	mu  sync.Mutex
	seq int
}

func main() {
	asJSON := flag.Bool("json", false, "print JSON instead of a table")
	n := flag.Int("n", 5, "samples per single measurement")
	floor := flag.Bool("floor", false, "only the restore floor other benchmarks compare against: cold boot, restore (sandlot's VM layer and bare QEMU)")
	clones := flag.Int("floor-clones", 0, "with -floor: also the host free-memory drop per idle bare clone at this many clones")
	concurrent := flag.String("floor-concurrent", "", "with -floor: also the wall time of this many bare restores at once (a list: 10,100)")
	flag.Parse()
	var levels []int
	var err error
	if *concurrent != "" {
		levels, err = sbxbench.ParseLevels("floor-concurrent", *concurrent)
	}
	if err == nil {
		err = run(*asJSON, *n, *floor, *clones, levels)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-vm:", err)
		os.Exit(1)
	}
}

func run(asJSON bool, n int, floor bool, clones int, concurrent []int) error {
	env, err := vmtest.LoadEnv()
	if err != nil {
		return err
	}
	accel, err := vm.DetectAccel()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-vm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{env: env, dir: dir, accel: accel, n: n, floorOnly: floor, floorClones: clones, floorConcurrent: concurrent}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := b.all(ctx); err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"accel": accel, "results": b.Results})
	}
	b.print()
	return nil
}

func (b *bench) add(name, unit string, samples []float64, note string) {
	b.Add(name, unit, samples, note)
}

func (b *bench) print() {
	qv, _ := vm.QEMUVersion("")
	b.Print(os.Stdout, fmt.Sprintf("sandlot VM layer, accel %s, QEMU %s, Debian bookworm guest (256 MiB, 1 vCPU), %s", b.accel, qv, host.Describe()))
	fmt.Println()
	b.Ratio(os.Stdout, "restore to first answer (sandlot)", "restore to first answer (floor: bare QEMU)")
	b.Ratio(os.Stdout, "idle clone PSS (sandlot)", "idle clone PSS (floor: bare QEMU clone)")
}

var ms = stats.MS

// next numbers VMs: run directories, names, MACs and addresses.
func (b *bench) next() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	return b.seq
}

func (b *bench) guest(name string) (vmtest.Guest, error) {
	n := b.next()
	g, err := vmtest.NewGuest(fmt.Sprintf("%s%d", name, n), fmt.Sprintf("10.0.2.%d", 100+n%150), n)
	return g, err
}

func (b *bench) config(g vmtest.Guest, base string) vm.Config {
	n := b.next()
	// Jailed as the shim jails every VM: the figures are the product's.
	return vm.Config{Name: fmt.Sprintf("bench-%s-%d", g.Name, n), RunDir: filepath.Join(b.dir, fmt.Sprint("run", n)),
		BaseDisk: base, Net: g.Net, LayerMiB: 512, Accel: b.accel,
		Jail: &vm.Jail{UID: benchFirstUID + n, GID: benchFirstUID + n, SharedGID: benchFirstUID - 1}}
}

// benchFirstUID is the first uid the benchmark's jailed VMs run as (one
// per VM; nothing on the machine owns them).
const benchFirstUID = 380001
