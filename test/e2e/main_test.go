package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/test/cluster"
	"github.com/sandlot-dev/sandlot/test/crienv"
)

// c is the cluster every test uses: two nodes started for this run
// (tests kill and restart kubelets, so never a `make up` cluster), taken
// down after it with the host checked clean.
var c *cluster.Cluster

func TestMain(m *testing.M) {
	code := 1
	err := crienv.Run("e2e", func(t crienv.T) {
		before := cluster.SnapshotHost()
		dir, err := os.MkdirTemp("/var/tmp", "sl-e2e-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if os.Getenv("SANDLOT_E2E_KEEP") != "" {
				logf("e2e: kept %s (SANDLOT_E2E_KEEP)", dir)
			} else {
				os.RemoveAll(dir)
			}
			checkClean(t, before)
		})
		bin := filepath.Join(dir, "bin")
		if err := cluster.Build(bin); err != nil {
			t.Fatal(err)
		}
		c = cluster.Start(t, cluster.Options{Dir: filepath.Join(dir, "c"), Nodes: 2, BinDir: bin, Logf: logf})
		code = m.Run()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// checkClean fails when the cluster left anything on the host.
func checkClean(t crienv.T, before cluster.HostState) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		diff := before.Diff(cluster.SnapshotHost())
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the cluster left on the host:\n%s", strings.Join(diff, "\n"))
			return
		}
		time.Sleep(time.Second)
	}
}
