// Package e2b drives sandlot-api, the E2B REST facade and sandbox proxy,
// with the real, unmodified E2B SDKs (sdk.test.mjs) on a real two-node
// cluster running sandlot as its chart installs it; the pods reach a
// test internet (test/inet), which the SDK's network rules open and close.
package e2b

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

func TestMain(m *testing.M) {
	sbxtest.Main(m, "e2b", &c, func(t crienv.T, dir string, o *cluster.Options) {
		x := inet.Start(t)
		o.Prefix = inet.PodPrefix // the test internet's policy route matches the pods
		o.DNS = []string{inet.IPDNS}
		o.Interpreter = true // the default template is E2B's code interpreter, data stack included
		o.Teams = []string{teamB}
		// The chart's API: the SDKs' default template IDs resolve to the
		// suite's template; sandbox hosts under domain, over TLS.
		o.APIDomain = domain
		// Volumes on a directory both nodes of this one-machine cluster
		// mount: shared storage, as volumes.hostPath must be.
		o.Values = map[string]any{"api": map[string]any{"defaultTemplate": template},
			"volumes": map[string]any{"hostPath": filepath.Join(dir, "volumes")},
			// The egress proxy trusts the secure host's CA (a private API's).
			"network": map[string]any{"upstreamCAFile": x.CAFile()}}
	})
}

// inetEnv tells sdk.test.mjs what of the test internet to try.
func inetEnv() []string {
	return []string{"SANDLOT_NET_PUBLIC=" + inet.IPPublic, "SANDLOT_NET_PUBLIC_BODY=" + inet.Bodies[inet.IPPublic],
		"SANDLOT_NET_RANGE=" + inet.IPRange, "SANDLOT_NET_RANGE_BODY=" + inet.Bodies[inet.IPRange],
		"SANDLOT_NET_DOMAIN=api.allowed.test", "SANDLOT_NET_DOMAIN_BODY=" + inet.Bodies[inet.IPAllowed],
		"SANDLOT_NET_SECURE=" + inet.SecureName,
		fmt.Sprintf("SANDLOT_NET_SOCKS=%s:%d", inet.IPSocks, inet.SocksPort), "SANDLOT_NET_SOCKS_LOG=" + inet.IPSocks,
		"SANDLOT_NET_SOCKS_USER=" + inet.SocksUser, "SANDLOT_NET_SOCKS_PASSWORD=" + inet.SocksPassword,
		fmt.Sprintf("SANDLOT_NET_NO_SOCKS=%s:%d", inet.IPNoSocks, inet.SocksPort),
		"SANDLOT_NET_GIT_REPO=" + inet.GitRepo, "SANDLOT_NET_GIT_ENV=" + gitEnv()}
}

// gitEnv is inet.GitRedirect as a JSON object: a sandbox's envs that make
// git in it fetch github.com from the test internet's git host.
func gitEnv() string {
	m := map[string]string{}
	for _, kv := range inet.GitRedirect() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}
