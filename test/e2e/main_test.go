package e2e

import (
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// c is the cluster every test uses: two nodes with the local store.
var c *cluster.Cluster

func TestMain(m *testing.M) { sbxtest.Main(m, "e2e", &c, nil) }
