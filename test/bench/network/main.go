// Command network measures what each sandbox's network filter costs (make
// bench-network): new-connection latency and TCP throughput from inside a
// VM to a host of the test internet (test/inet), for a sandbox with no
// rules, one with 100 CIDR rules and one with 20 allowed domains — beside
// the floor in the same run: a sandbox whose pod's nftables table is
// replaced by a bare forward between the tap and the pod's interface (no
// anti-spoofing, no flow tracking, no rules). One node; accel tcg here.
package main

import (
	"flag"
	"fmt"
	"os"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	"github.com/sandlot-dev/sandlot/vm"
)

func main() {
	asJSON := flag.Bool("json", false, "print JSON instead of a table")
	conns := flag.Int("conns", 300, "new connections timed per sandbox")
	runs := flag.Int("runs", 10, "rounds over the sandboxes: one transfer and conns/runs connections each per round")
	mib := flag.Int("mib", 32, "MiB sent per throughput transfer")
	flag.Parse()
	var table stats.Table
	err := crienv.Run("bench-network", func(t crienv.T) {
		b := newBench(t, &table, probeArgs{conns: *conns, runs: *runs, mib: *mib})
		rs := rows()
		sbxs := make([]*sandlotv1.Sandbox, len(rs))
		for i, r := range rs {
			sbxs[i] = b.start(r)
		}
		b.measure(rs, sbxs, *runs)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *asJSON {
		_ = table.JSON(os.Stdout)
		return
	}
	accel, _ := vm.DetectAccel()
	table.Print(os.Stdout, fmt.Sprintf("sandlot network filter: Kubernetes %s, accel %s, 1 node, VM 1 vCPU / 256 MiB, %d connections and %d x %d MiB per sandbox, %s",
		cluster.K8sVersion, accel, *conns, *runs, *mib, host.Describe()))
	fmt.Println()
	floor := rows()[0].name
	for _, r := range rows()[1:] {
		table.Ratio(os.Stdout, r.name+": connect", floor+": connect")
		table.Ratio(os.Stdout, r.name+": throughput", floor+": throughput")
	}
}
