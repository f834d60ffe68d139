package release

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// pluginPortForward: an HTTP server in the VM answers on the local port
// kubectl sandlot port-forward opens (to the sandbox's pod, whatever its
// name: with the chart's start slots it is not the sandbox's), and on the
// one plain kubectl port-forward of that pod opens: the shim makes the
// CRI's localhost in the pod's netns reach the VM.
func pluginPortForward(t *testing.T, name string) {
	marker := randomHex(t)
	vmRun(t, name, "mkdir -p /tmp/pf && echo "+marker+" > /tmp/pf/index.html")
	background(t, e.plugin, "-n", ns, "exec", name, "--", "python3", "-m", "http.server", "8000", "--directory", "/tmp/pf")
	// A port-forward ends at the first connection refused (as kubectl's
	// does): the server listens first.
	poll.Eventually(t, time.Minute, "the VM's server listens", func() error {
		return vmTry(name, `python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8000), 2)'`)
	})
	pod := sandboxOf(t, name).Status.PodName
	for _, cmd := range [][]string{
		{e.plugin, "-n", ns, "port-forward", name, ":8000"},
		{"kubectl", "-n", ns, "port-forward", "pod/" + pod, ":8000"},
	} {
		out := background(t, cmd[0], cmd[1:]...)
		what := strings.Join(cmd[3:], " ")
		var port string
		poll.Eventually(t, time.Minute, what+" listens", func() error {
			m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8000`).FindStringSubmatch(out.String())
			if m == nil {
				return fmt.Errorf("no forwarding line yet:\n%s", out.String())
			}
			port = m[1]
			return nil
		})
		poll.Eventually(t, time.Minute, "GET through "+what, func() error {
			return getBody("http://127.0.0.1:"+port+"/index.html", marker+"\n")
		})
	}
}

// vmTry runs a shell command in the sandbox's VM and says whether it
// exited 0 (for polling: vmRun fails the test).
func vmTry(sandbox, script string) error {
	cmd := exec.Command(e.plugin, "-n", ns, "exec", sandbox, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", script, err, out)
	}
	return nil
}

// getBody GETs url and wants exactly body.
func getBody(url, body string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(b) != body {
		return fmt.Errorf("%s answered %s %q, want 200 %q", url, resp.Status, b, body)
	}
	return nil
}

// background runs bin until the test ends, its stdout and stderr in the
// returned buffer (and in the log when the test fails).
func background(t *testing.T, bin string, args ...string) *lockedBuffer {
	t.Helper()
	out := &lockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s %s:\n%s", bin, strings.Join(args, " "), out.String())
		}
	})
	return out
}
