// Command dashboard renders the chart's Grafana dashboard from a real run
// on the local cluster (`NODES=2 make up`): `make dashboard-png`. See
// internal/dashboard.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/dashboard"
	"github.com/sandlot-dev/sandlot/vm"
)

type options struct {
	dir, prometheus, plugin, out, ns string
	duration                         time.Duration
}

func main() {
	root := cluster.RepoRoot()
	var o options
	flag.StringVar(&o.dir, "dir", envOr("SANDLOT_CLUSTER_DIR", "/var/tmp/sandlot-up"), "the cluster's state directory (make up)")
	flag.StringVar(&o.prometheus, "prometheus", "", "the Prometheus server binary (hack/prometheus-bins.sh)")
	flag.StringVar(&o.plugin, "plugin", filepath.Join(root, "bin", "kubectl-sandlot"), "the kubectl plugin (make build)")
	flag.StringVar(&o.out, "out", filepath.Join(root, "docs", "dashboard.png"), "the PNG to write")
	flag.StringVar(&o.ns, "n", "default", "the namespace the workload runs in")
	flag.DurationVar(&o.duration, "duration", 8*time.Minute, "how long the workload runs (its last cycle finishes)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	if o.prometheus == "" {
		return fmt.Errorf("-prometheus is required: make dashboard-png builds it (hack/prometheus-bins.sh)")
	}
	kubeconfig := filepath.Join(o.dir, "pki", "admin.kubeconfig")
	jobs, token, err := scrapeTargets(ctx, kubeconfig, o.ns)
	if err != nil {
		return err
	}
	data, err := os.MkdirTemp("", "sandlot-dashboard-")
	if err != nil {
		return err
	}
	defer func() { // kept when the run failed: prometheus.log says why
		if err == nil {
			err = os.RemoveAll(data)
		} else {
			fmt.Fprintln(os.Stderr, "dashboard: prometheus' files are kept in", data)
		}
	}()
	srv, err := dashboard.Start(ctx, o.prometheus, data, jobs, token)
	if err != nil {
		return err
	}
	defer srv.Stop()
	restore, err := warmPool(ctx, kubeconfig, o.ns)
	if err != nil {
		return err
	}
	defer restore()
	url, err := os.ReadFile(filepath.Join(o.dir, "api-url"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(filepath.Join(o.dir, "api-key"))
	if err != nil {
		return err
	}
	start := time.Now()
	w := dashboard.Workload{Plugin: o.plugin, Kubeconfig: kubeconfig, Namespace: o.ns, Log: os.Stderr,
		APIURL: strings.TrimSpace(string(url)), APIKey: strings.TrimSpace(string(key))}
	if err := w.Run(ctx, o.duration); err != nil {
		return err
	}
	end := time.Now()
	if err := srv.WaitScraped(ctx, end); err != nil {
		return err
	}
	return render(ctx, srv, o, start, end)
}

// scrapeTargets applies the quickstart (its template is what the
// workload starts) and returns the chart's metrics jobs and a scraper's
// token.
func scrapeTargets(ctx context.Context, kubeconfig, ns string) ([]dashboard.Job, string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %s (is `NODES=2 make up` running?): %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	quickstart := filepath.Join(cluster.RepoRoot(), "config", "samples", "quickstart.yaml")
	if out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "apply", "-f", quickstart).CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("apply %s: %v: %s", quickstart, err, out)
	}
	token, err := dashboard.ScraperToken(ctx, cs, ns, "sandlot-dashboard-scraper")
	if err != nil {
		return nil, "", err
	}
	jobs, err := dashboard.Jobs(ctx, cs, cluster.ReleaseNamespace)
	return jobs, token, err
}

// warmPool gives the quickstart's template a warm pool of one per node
// for the run, so the pool panels have something to show; restore puts
// back what it had.
func warmPool(ctx context.Context, kubeconfig, ns string) (restore func(), err error) {
	kubectl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	was, err := kubectl("get", "template", "python", "-o", "jsonpath={.spec.warmPool}")
	if err != nil {
		return nil, err
	}
	if _, err := kubectl("patch", "template", "python", "--type", "merge", "-p", `{"spec":{"warmPool":1}}`); err != nil {
		return nil, err
	}
	return func() {
		if _, err := kubectl("patch", "template", "python", "--type", "merge", "-p", `{"spec":{"warmPool":`+cmp.Or(was, "0")+`}}`); err != nil {
			fmt.Fprintln(os.Stderr, "dashboard: put the warm pool back:", err)
		}
	}, nil
}

// render queries every panel's targets over the run and writes the PNG.
func render(ctx context.Context, srv *dashboard.Server, o options, start, end time.Time) error {
	d, err := dashboard.Load(filepath.Join(cluster.RepoRoot(), "charts", "sandlot", "files", "dashboard.json"))
	if err != nil {
		return err
	}
	step, err := dashboard.Step(start, end)
	if err != nil {
		return err
	}
	data := dashboard.Data{}
	for i, p := range d.Panels {
		for _, t := range p.Targets {
			s, err := srv.QueryRange(ctx, t.Query(), start, end, step)
			if err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
			data[i] = append(data[i], s)
		}
		if p.Type != "row" && len(data[i]) > 0 && seriesIn(data[i]) == 0 {
			fmt.Fprintf(os.Stderr, "dashboard: panel %q had no data in the run\n", p.Title)
		}
	}
	f, err := os.Create(o.out)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("sandlot: the chart's dashboard over %s of a real run (%s, accel %s; rendered by make dashboard-png)",
		end.Sub(start).Round(time.Second), start.UTC().Format("2006-01-02 15:04 MST"), accel())
	if err := dashboard.Render(f, d, data, dashboard.Run{Title: title, Start: start, End: end}); err != nil {
		f.Close()
		return err
	}
	fmt.Fprintln(os.Stderr, "dashboard: wrote", o.out)
	return f.Close()
}

func seriesIn(targets [][]dashboard.Series) int {
	n := 0
	for _, s := range targets {
		n += len(s)
	}
	return n
}

// accel is the VMs' accelerator here, as the VM layer picks it.
func accel() string {
	a, err := vm.DetectAccel()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.ToUpper(a)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
