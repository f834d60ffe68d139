// Package guest runs sandlot-guest on the host for the E2B SDK tests and
// benchmarks: built from this checkout, in a throwaway root (a private
// mount namespace, see hack/guest-root.sh), on the ports the SDK's debug
// mode uses (envd 49983, interpreter 49999).
package guest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/kube"
)

// Dir is this Node package's directory.
func Dir() string { return filepath.Join(kube.Root(), "test", "guest") }

// CheckTools names what is missing to run the agent and the SDK.
func CheckTools() error {
	for _, tool := range []string{"node", "npm", "unshare", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: install it (node 20 + npm for the E2B SDK, util-linux for unshare, python3 for the interpreter)", tool)
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the guest harness builds a sandbox root with mounts: run it as root")
	}
	return nil
}

// NPMInstall installs the pinned SDKs from package-lock.json.
func NPMInstall() error {
	return Run(nil, "npm", "ci", "--no-audit", "--no-fund")
}

// BuildAgent builds cmd/sandlot-guest into dir.
func BuildAgent(dir string) (string, error) {
	bin := filepath.Join(dir, "sandlot-guest")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sandlot-guest")
	cmd.Dir = kube.Root()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build sandlot-guest: %w\n%s", err, out)
	}
	return bin, nil
}

// Agent is a running sandlot-guest.
type Agent struct {
	Root    string // the sandbox's "/" on the host
	Control string // the control channel's unix socket
	cmd     *exec.Cmd
	cancel  context.CancelFunc
}

// StartAgent runs bin with its root and control socket under dir and
// waits for both APIs to answer.
func StartAgent(bin, dir string) (*Agent, error) {
	a := &Agent{Root: filepath.Join(dir, "root"), Control: filepath.Join(dir, "control.sock")}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.cmd = exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--",
		filepath.Join(kube.Root(), "hack", "guest-root.sh"), a.Root, bin, "--root", a.Root, "--control", a.Control)
	a.cmd.Stdout, a.cmd.Stderr = os.Stdout, os.Stderr
	a.cmd.Cancel = func() error { return a.cmd.Process.Signal(os.Interrupt) }
	a.cmd.WaitDelay = 10 * time.Second
	if err := a.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start agent: %w", err)
	}
	for _, url := range []string{"http://127.0.0.1:49983/health", "http://127.0.0.1:49999/health"} {
		if err := poll.Within(20*time.Second, url+" answering", func() error { return answers(url) }); err != nil {
			a.Stop()
			return nil, err
		}
	}
	if err := a.open(); err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}

// open pushes an identity without a token that says so (E2B's
// secure=false): a guest with no identity refuses every call, and these
// tests drive it as the SDK does in debug mode, without a token.
func (a *Agent) open() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, a.Control)
	if err != nil {
		return fmt.Errorf("control channel: %w", err)
	}
	defer c.Close()
	res, err := c.SetIdentity(ctx, identity.Identity{Open: true}, make([]byte, 64))
	if err != nil {
		return fmt.Errorf("open the guest: %w", err)
	}
	return res.Err()
}

// Stop ends the agent (and with it the mount namespace).
func (a *Agent) Stop() {
	a.cancel()
	_ = a.cmd.Wait()
}

// answers is nil once GET url succeeds.
func answers(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// Run runs a command in this package's directory with extra env.
func Run(env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = Dir()
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %v: %w", name, args, err)
	}
	return nil
}

// SDKEnv is the environment the SDK needs for debug mode.
var SDKEnv = []string{"E2B_DEBUG=true", "E2B_API_KEY=e2b_debug"}
