// containerd-shim-sandlot-v2 is the containerd runtime v2 shim that runs
// each pod as a microVM (runtime_type io.containerd.sandlot.v2).
package main

import (
	"context"
	"os"

	"github.com/containerd/containerd/v2/pkg/shim"

	"github.com/sandlot-dev/sandlot/internal/version"
	sandlotshim "github.com/sandlot-dev/sandlot/shim"
)

func main() {
	if version.Requested(os.Args[1:]) {
		version.Print(os.Stdout, "containerd-shim-sandlot-v2")
		return
	}
	sandlotshim.Register()
	// QEMU is the shim's child, waited for by the VM layer: the library's
	// reaper would race that Wait and lose QEMU's exit status.
	shim.RunShim(context.Background(), sandlotshim.Manager{}, func(c *shim.Config) {
		c.NoReaper = true
		c.NoSubreaper = true
	})
}
