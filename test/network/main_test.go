// Package network tries each sandbox's network policy from inside its VM
// on a real two-node cluster (internal/cluster), against a "test internet":
// a network namespace on the host with TEST-NET addresses (web hosts, a
// metadata-like server on 169.254.169.254, a DNS server the pods use) that
// the pods reach through the host as they would the real one. It checks
// that a sandbox is closed by default, that spec.network's rules (domains
// too) hold and change live, that they survive a pause and a fork, and
// that forged frames never leave a VM.
package network

import (
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var (
	c    *cluster.Cluster
	tnet *inet.Internet
)

// tpl is the suite's template (sbxtest.Template: the default image, its
// base Ready on both nodes).
const tpl = "net"

func TestMain(m *testing.M) {
	sbxtest.Main(m, "network", &c, func(t crienv.T, _ string, o *cluster.Options) {
		tnet = inet.Start(t)
		// The policy route to the test internet matches the pods' sources.
		o.Prefix = inet.PodPrefix
		o.DNS = []string{inet.IPDNS} // CoreDNS's upstream
		o.ClusterDNS = true
		// The operator lets an allowOut open the metadata-like host (a
		// platform denial otherwise): TestAllowOutRules opens it, and
		// TestClosedByDefault finds it closed without one.
		// resolveWhenClosed: a cluster name a closed sandbox still resolves
		// (TestPlatformDenials; the answer opens nothing).
		o.Values = map[string]any{"network": map[string]any{"openOut": []any{inet.IPMeta + "/32"},
			"resolveWhenClosed": []any{clusterName}}}
	})
}
