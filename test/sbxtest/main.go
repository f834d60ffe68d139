package sbxtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// Main runs a test binary's tests on a two-node cluster of its own
// (tests kill and restart kubelets and agents, so never a `make up`
// cluster): sandlot built for this run and installed with its Helm chart
// (its images, DaemonSet, Deployments, accounts and policies; a suite
// differs only in values), the cluster taken down after it and the host
// checked clean. SANDLOT_E2E_KEEP=1 keeps its directory.
// configure may shape the options (a store, agent flags) and start what
// the cluster needs first; *c is set before the tests run. Main exits.
func Main(m *testing.M, name string, c **cluster.Cluster, configure func(t crienv.T, dir string, o *cluster.Options)) {
	code := 1
	err := crienv.Run(name, func(t crienv.T) {
		before := cluster.SnapshotHost()
		// Short: node directories hold the shims' unix sockets.
		dir, err := os.MkdirTemp("/var/tmp", "s-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if os.Getenv("SANDLOT_E2E_KEEP") != "" {
				Logf("%s: kept %s (SANDLOT_E2E_KEEP)", name, dir)
			} else {
				os.RemoveAll(dir)
			}
			checkClean(t, before)
		})
		bin := filepath.Join(dir, "bin")
		if err := cluster.Build(bin); err != nil {
			t.Fatal(err)
		}
		if err := cluster.BuildImages(bin); err != nil {
			t.Fatal(err)
		}
		o := cluster.Options{Dir: filepath.Join(dir, "c"), Nodes: 2, BinDir: bin, Logf: Logf}
		if configure != nil {
			configure(t, dir, &o)
		}
		*c = cluster.Start(t, o)
		code = m.Run()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// Logf writes a timestamped line to stderr.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// checkClean fails when the cluster left anything on the host.
func checkClean(t crienv.T, before cluster.HostState) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Every second: a snapshot of the host runs ip and iptables-save.
	err := poll.Every(ctx, time.Second, "the host clean after the cluster", func() error {
		if diff := before.Diff(cluster.SnapshotHost()); len(diff) > 0 {
			return fmt.Errorf("the cluster left on the host:\n%s", strings.Join(diff, "\n"))
		}
		return nil
	})
	if err != nil {
		t.Errorf("%v", err)
	}
}
