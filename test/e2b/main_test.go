// Package e2b drives sandlot-api, the E2B REST facade and sandbox proxy,
// with the real, unmodified E2B SDKs (sdk.test.mjs) on a real two-node
// cluster running sandlot's controller and node agents.
package e2b

import (
	"testing"

	"github.com/sandlot-dev/sandlot/test/cluster"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

func TestMain(m *testing.M) { sbxtest.Main(m, "e2b", &c, nil) }
