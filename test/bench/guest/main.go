// Command guest benchmarks sandlot-guest through the real E2B SDK
// (test/guest/bench.mjs) against the same operations done on the host.
//
//	make bench-guest
package main

import (
	"fmt"
	"os"

	"github.com/sandlot-dev/sandlot/test/guest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-guest:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := guest.CheckTools(); err != nil {
		return err
	}
	if err := guest.NPMInstall(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bench-guest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := guest.BuildAgent(tmp)
	if err != nil {
		return err
	}
	agent, err := guest.StartAgent(bin, tmp)
	if err != nil {
		return err
	}
	defer agent.Stop()
	return guest.Run(guest.SDKEnv, "node", "bench.mjs")
}
