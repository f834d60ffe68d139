// Package upgrade installs the previous release (its release folder,
// `make release` of its git tag: hack/previous-release.sh) on a real
// two-node cluster with the s3 store, makes the state a platform team
// has — a running sandbox with files, a paused one, a snapshot, a
// template with its bases and a warm pool — then `helm upgrade`s to this
// checkout and checks every piece of it: the running sandbox keeps its
// pod, the paused one resumes, the snapshot restores, and the template's
// bases are built again for the nodes' new guest while the old ones
// serve. `make test-upgrade` runs it.
package upgrade

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

var c *cluster.Cluster

func TestMain(m *testing.M) {
	sbxtest.Main(m, "upgrade", &c, func(t crienv.T, _ string, o *cluster.Options) {
		o.Release = os.Getenv("SANDLOT_PREVIOUS_RELEASE")
		if o.Release == "" {
			t.Fatal("SANDLOT_PREVIOUS_RELEASE is not set: run `make test-upgrade` (hack/previous-release.sh builds the previous release's folder)")
		}
		if _, err := os.Stat(filepath.Join(o.Release, "SHA256SUMS")); err != nil {
			t.Fatalf("previous release %s: %v: run hack/previous-release.sh", o.Release, err)
		}
		o.MinIO = true
	})
}
