// Package lifecycle tests what a sandbox's life is made of on a real
// two-node cluster (internal/cluster, local store): templates that build their
// own base snapshot and sandboxes that restore it, fork, rollback,
// timeouts and auto-pause, and templates that cannot be built.
package lifecycle

import (
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

func TestMain(m *testing.M) { sbxtest.Main(m, "lifecycle", &c, nil) }
