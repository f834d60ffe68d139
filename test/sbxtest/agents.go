package sbxtest

import (
	"sync"
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
)

// StopAgents crashes the agents of nodes and keeps them off
// (cluster.StopAgent); the function returned starts them again and waits
// until they are Ready. It also runs when the test ends, so a failure
// cannot leave a later test without its agents.
func StopAgents(t *testing.T, c *cluster.Cluster, nodes ...string) (start func()) {
	t.Helper()
	var once sync.Once
	start = func() {
		once.Do(func() {
			for _, n := range nodes {
				if err := c.StartAgent(n); err != nil {
					t.Errorf("start the agent on %s again: %v", n, err)
				}
			}
		})
	}
	t.Cleanup(start)
	for _, n := range nodes {
		if err := c.StopAgent(n); err != nil {
			t.Fatalf("stop the agent on %s: %v", n, err)
		}
	}
	return start
}

// NodeNames are the cluster's nodes.
func NodeNames(c *cluster.Cluster) []string {
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	return names
}
