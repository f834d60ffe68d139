package sbxtest

import (
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/sandlot-dev/sandlot/internal/cluster"
)

// BuildPlugin builds kubectl-sandlot from this checkout into dir, stamped
// as make build stamps it, and returns its path.
func BuildPlugin(dir string) (string, error) {
	ldflags, err := cluster.VersionLDFlags()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "kubectl-sandlot")
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", out, "./cmd/kubectl-sandlot")
	build.Dir = cluster.RepoRoot()
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kubectl-sandlot: %w: %s", err, b)
	}
	return out, nil
}
