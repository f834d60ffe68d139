package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Workload drives a cluster the way its panels measure: creates from a
// template, a snapshot and clones of it, a pause and a resume, deletes;
// cycle after cycle, through the kubectl plugin, for at least d.
type Workload struct {
	Plugin, Kubeconfig, Namespace string
	// APIURL and APIKey reach sandlot-api: each cycle also creates and
	// kills a sandbox through the E2B API ("" skips it).
	APIURL, APIKey string
	Log            io.Writer
}

// Run repeats cycles until d has passed (the last one finishes), logging
// how many steps failed; it fails when no cycle completed.
func (w Workload) Run(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	done, failed := 0, 0
	for i := 0; time.Now().Before(end); i++ {
		n, err := w.cycle(ctx, i)
		failed += n
		if err != nil {
			return err
		}
		done++
		fmt.Fprintf(w.Log, "workload: cycle %d done (%d failed steps so far)\n", i, failed)
	}
	if done == 0 {
		return fmt.Errorf("workload: no cycle completed in %s", d)
	}
	return nil
}

// cycle runs one round; a failed step is counted and the round goes on
// (the failure shows on the dashboard), a cancelled context ends it.
func (w Workload) cycle(ctx context.Context, i int) (failed int, err error) {
	p := fmt.Sprintf("dash-%d", i)
	made := []string{p + "-a", p + "-b"}
	steps := [][]string{
		{"create", "--template", "python", "--lifetime", "30m", "--wait", "--timeout", "10m", p + "-a"},
		{"create", "--template", "python", "--lifetime", "30m", "--wait", "--timeout", "10m", p + "-b"},
		{"snapshot", p + "-a", "--name", p + "-snap", "--wait", "--timeout", "10m"},
		{"clone", p + "-snap", "--count", "2", "--wait", "--timeout", "10m", "-o", "name"},
		{"pause", p + "-b", "--wait", "--timeout", "10m"},
		{"resume", p + "-b", "--wait", "--timeout", "10m"},
	}
	if w.APIURL != "" {
		if err := w.e2bCreateKill(ctx); err != nil {
			failed++
			fmt.Fprintf(w.Log, "workload: E2B create and kill: %v\n", err)
		}
	}
	for _, s := range steps {
		out, err := w.plugin(ctx, s...)
		if err != nil {
			if ctx.Err() != nil {
				return failed, ctx.Err()
			}
			failed++
			fmt.Fprintf(w.Log, "workload: %s: %v\n", strings.Join(s, " "), err)
		}
		for _, l := range strings.Fields(out) {
			if name, ok := strings.CutPrefix(l, "sandbox.sandlot.dev/"); ok {
				made = append(made, name)
			}
		}
	}
	return failed, w.cleanUp(ctx, p, made)
}

// cleanUp deletes the cycle's sandboxes and its snapshot.
func (w Workload) cleanUp(ctx context.Context, p string, sandboxes []string) error {
	if _, err := w.plugin(ctx, append([]string{"delete", "--wait"}, sandboxes...)...); err != nil {
		return err
	}
	_, err := w.run(ctx, "kubectl", "-n", w.Namespace, "delete", "snapshot", p+"-snap", "--wait", "--ignore-not-found")
	return err
}

func (w Workload) plugin(ctx context.Context, args ...string) (string, error) {
	return w.run(ctx, w.Plugin, append([]string{"-n", w.Namespace}, args...)...)
}

// run returns the command's stdout; its stderr goes into the error.
func (w Workload) run(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+w.Kubeconfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// e2bCreateKill creates a sandbox of the template through the E2B API
// and kills it, as an SDK's Sandbox.create() and kill() do.
func (w Workload) e2bCreateKill(ctx context.Context) error {
	var created struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := w.e2b(ctx, http.MethodPost, "/sandboxes", `{"templateID":"python","timeout":300}`, &created); err != nil {
		return err
	}
	if created.SandboxID == "" {
		return fmt.Errorf("POST /sandboxes answered no sandboxID")
	}
	return w.e2b(ctx, http.MethodDelete, "/sandboxes/"+created.SandboxID, "", nil)
}

func (w Workload) e2b(ctx context.Context, method, path, body string, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, w.APIURL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", w.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(b, into)
}
