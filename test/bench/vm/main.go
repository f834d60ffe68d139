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
	"sort"
	"sync"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/host"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

type result struct {
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`
	Samples []float64 `json:"samples"`
	Min     float64   `json:"min"`
	Median  float64   `json:"median"`
	P95     float64   `json:"p95"`
	Max     float64   `json:"max"`
	Note    string    `json:"note,omitempty"`
}

type bench struct {
	env     vmtest.Env
	dir     string
	accel   string
	n       int
	results []result
	mu      sync.Mutex
	seq     int
}

func main() {
	asJSON := flag.Bool("json", false, "print JSON instead of a table")
	n := flag.Int("n", 5, "samples per single measurement")
	flag.Parse()
	if err := run(*asJSON, *n); err != nil {
		fmt.Fprintln(os.Stderr, "bench-vm:", err)
		os.Exit(1)
	}
}

func run(asJSON bool, n int) error {
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
	b := &bench{env: env, dir: dir, accel: accel, n: n}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := b.all(ctx); err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"accel": accel, "results": b.results})
	}
	b.print()
	return nil
}

func (b *bench) add(name, unit string, samples []float64, note string) {
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	pick := func(p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }
	b.results = append(b.results, result{Name: name, Unit: unit, Samples: samples, Min: s[0], Median: pick(0.5),
		P95: pick(0.95), Max: s[len(s)-1], Note: note})
}

func (b *bench) median(name string) float64 {
	for _, r := range b.results {
		if r.Name == name {
			return r.Median
		}
	}
	return 0
}

func (b *bench) print() {
	qv, _ := vm.QEMUVersion("")
	fmt.Printf("# sandlot VM layer, accel %s, QEMU %s, Debian bookworm guest (256 MiB, 1 vCPU), %s\n", b.accel, qv, host.Describe())
	fmt.Printf("%-58s %6s %10s %10s %10s %10s\n", "measure", "n", "min", "median", "p95", "max")
	for _, r := range b.results {
		fmt.Printf("%-58s %6d %10s %10s %10s %10s\n", r.Name, len(r.Samples), fmtv(r.Min, r.Unit), fmtv(r.Median, r.Unit),
			fmtv(r.P95, r.Unit), fmtv(r.Max, r.Unit))
	}
	ratio := func(a, f string) {
		if x, y := b.median(a), b.median(f); y > 0 {
			fmt.Printf("%s / %s: %.2fx\n", a, f, x/y)
		}
	}
	fmt.Println()
	ratio("restore to first answer (sandlot)", "restore to first answer (floor: bare QEMU)")
	ratio("idle clone PSS (sandlot)", "idle clone PSS (floor: bare QEMU clone)")
}

func fmtv(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.1fms", v)
	case "MiB":
		return fmt.Sprintf("%.1fMiB", v)
	case "%":
		return fmt.Sprintf("%.1f%%", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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
	return vm.Config{Name: fmt.Sprintf("bench-%s-%d", g.Name, n), RunDir: filepath.Join(b.dir, fmt.Sprint("run", n)),
		BaseDisk: base, Net: g.Net, LayerMiB: 512, Accel: b.accel}
}
