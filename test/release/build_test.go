package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// e2bBuild builds a template with every step kind (a file, an env, a
// workdir, a user, RUNs as root and as the user, a start command with a
// ready check) with the unchanged SDK through the chart's API Service,
// then starts a sandbox of it: the build's steps run from the agent's
// pod into the builder VM, as installed (stop 33's suites ran the agent
// on the host and missed that the builder refused the pod).
func e2bBuild(t *testing.T) {
	env, err := vmtest.LoadEnv()
	if err != nil || env.ImageRef == "" {
		t.Fatalf("no default sandbox image (make vm-assets): %v", err)
	}
	url, key := chartAPI(t)
	cmd := exec.Command("node", "--test", "--test-reporter=spec", "--test-name-pattern=^Template.build: a file",
		"build.test.mjs")
	cmd.Dir = filepath.Join(cluster.RepoRoot(), "test", "e2b")
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+key,
		"SANDLOT_BUILD_IMAGE="+env.ImageRef)
	out, err := cmd.CombinedOutput()
	if err != nil {
		dumpAPI(t)
		t.Fatalf("the E2B template build failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	// A pattern that matched nothing passes too: the build must have run.
	if !regexp.MustCompile(`(?m)^. pass 1$`).Match(out) {
		t.Fatalf("the build test did not run (want one passed test)")
	}
}
