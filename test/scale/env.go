package scale

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/kube"
)

// Namespace holds the simulated workload's sandboxes and templates.
const Namespace = "scale"

// Env is a real kube-apiserver and etcd (envtest) with sandlot's own
// binaries — sandlot-controller and sandlot-api, each authenticating as
// its chart service account under the chart's RBAC — running against it.
type Env struct {
	Kube       *kube.Env
	Admin      client.Client
	Dir        string
	Controller *exec.Cmd
	API        *exec.Cmd
	APIURL     string
	APIKey     string
	log        io.Writer
}

// Setup starts the API server, builds and starts the two binaries (their
// logs go to Dir) and issues an API key for Namespace.
func Setup(ctx context.Context, log io.Writer) (*Env, error) {
	k, err := kube.Start()
	if err != nil {
		return nil, err
	}
	k.ChartValues = map[string]any{"api": map[string]any{"namespace": Namespace}}
	e := &Env{Kube: k, Admin: k.Client, log: log}
	if e.Dir, err = os.MkdirTemp("", "sandlot-scale-"); err != nil {
		e.Stop()
		return nil, err
	}
	if err := e.start(ctx); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Env) start(ctx context.Context) error {
	for _, ns := range []string{kube.ReleaseNamespace, Namespace} {
		if err := e.Admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	began := time.Now()
	build := exec.CommandContext(ctx, "go", "build", "-o", e.Dir+"/", "./cmd/sandlot-controller", "./cmd/sandlot-api")
	build.Dir, build.Stdout, build.Stderr = kube.Root(), e.log, e.log
	if err := build.Run(); err != nil {
		return fmt.Errorf("build sandlot-controller and sandlot-api: %w", err)
	}
	fmt.Fprintf(e.log, "# built sandlot-controller and sandlot-api in %v\n", time.Since(began).Round(time.Second))
	metrics, err := freePort()
	if err != nil {
		return err
	}
	args := []string{"--metrics-bind-address=127.0.0.1:" + metrics, "--health-probe-bind-address=0"}
	if addr := os.Getenv("SANDLOT_SCALE_PPROF"); addr != "" {
		args = append(args, "--pprof-bind-address="+addr) // go tool pprof http://<addr>/debug/pprof/profile
	}
	// Flags to try, e.g. --sandbox-workers=32.
	args = append(args, strings.Fields(os.Getenv("SANDLOT_SCALE_CONTROLLER_ARGS"))...)
	if e.Controller, err = e.run(ctx, "sandlot-controller", args...); err != nil {
		return err
	}
	return e.startAPI(ctx)
}

// startAPI issues a key (as an admin does), then serves the E2B API for
// Namespace.
func (e *Env) startAPI(ctx context.Context) error {
	admin, err := e.Kube.Kubeconfig(e.Dir)
	if err != nil {
		return err
	}
	issue := exec.CommandContext(ctx, filepath.Join(e.Dir, "sandlot-api"), "issue-key", "--namespace="+Namespace, "--name=scale")
	issue.Env = append(os.Environ(), "KUBECONFIG="+admin)
	out, err := issue.Output()
	if err != nil {
		return fmt.Errorf("sandlot-api issue-key: %w: %s", err, errOutput(err))
	}
	e.APIKey = string(bytes.TrimSpace(out))
	port, err := freePort()
	if err != nil {
		return err
	}
	e.APIURL = "http://127.0.0.1:" + port
	if e.API, err = e.run(ctx, "sandlot-api", "--listen=127.0.0.1:"+port, "--namespace="+Namespace, "--create-rate=0"); err != nil {
		return err
	}
	return poll.Within(30*time.Second, "sandlot-api answers", func() error {
		resp, err := http.Get(e.APIURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

// command is one of the binaries as its component's service account.
func (e *Env) command(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	cfg, err := e.Kube.ComponentKubeconfig(name, e.Dir)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(e.Dir, name), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cfg)
	logf, err := os.OpenFile(filepath.Join(e.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	return cmd, nil
}

func (e *Env) run(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	cmd, err := e.command(ctx, name, args...)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return cmd, nil
}

// Stop ends the binaries and the API server; the logs stay in Dir when
// SANDLOT_E2E_KEEP is set.
func (e *Env) Stop() {
	for _, c := range []*exec.Cmd{e.API, e.Controller} {
		if c != nil && c.Process != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	_ = e.Kube.Stop()
	if e.Dir != "" && os.Getenv("SANDLOT_E2E_KEEP") == "" {
		os.RemoveAll(e.Dir)
	}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

func errOutput(err error) []byte {
	if x, ok := err.(*exec.ExitError); ok {
		return x.Stderr
	}
	return nil
}
