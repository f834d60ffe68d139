// Command cluster runs the local cluster behind `make up` / `make down`:
//
//	cluster up   [-nodes N]   start it in the background (idempotent) and
//	                          print the kubeconfig path and what to try
//	cluster down              stop it and undo every host change
//	cluster serve             run it in the foreground until SIGTERM
//
// `up` starts `serve` as a daemon: one process owns every cluster process
// (they die with it) and undoes the host changes when told to stop.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
)

func main() {
	fs := flag.NewFlagSet("cluster", flag.ExitOnError)
	dir := fs.String("dir", envOr("SANDLOT_CLUSTER_DIR", "/var/tmp/sandlot-up"), "cluster state directory")
	nodes := fs.Int("nodes", envInt("NODES", 1), "nodes (1 or 2)")
	bin := fs.String("bin", filepath.Join(cluster.RepoRoot(), "bin"), "directory with sandlot-controller and containerd-shim-sandlot-v2")
	store := fs.String("store", envOr("STORE", "s3"), "the chart's store: s3 (a local MinIO) or juicefs (a live JuiceFS through its CSI driver)")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down|serve [flags] | restart-containerd NODE")
		os.Exit(2)
	}
	_ = fs.Parse(os.Args[2:])
	if *store != "s3" && *store != "juicefs" {
		fmt.Fprintf(os.Stderr, "cluster: -store %q: want s3 or juicefs\n", *store)
		os.Exit(2)
	}
	d := daemon{dir: *dir, nodes: *nodes, bin: *bin, store: *store}
	var err error
	switch os.Args[1] {
	case "restart-containerd":
		err = d.restartContainerd(fs.Arg(0))
	case "up":
		err = d.up()
	case "down":
		err = d.down()
	case "serve":
		err = d.serve()
	default:
		err = fmt.Errorf("unknown command %q: want up, down, serve or restart-containerd", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

type daemon struct {
	dir   string
	nodes int
	bin   string
	store string
}

func (d daemon) pidFile() string       { return filepath.Join(d.dir, "cluster.pid") }
func (d daemon) readyFile() string     { return filepath.Join(d.dir, "ready") }
func (d daemon) logFile() string       { return filepath.Join(d.dir, "cluster.log") }
func (d daemon) controlSocket() string { return filepath.Join(d.dir, "control.sock") }
func (d daemon) apiKeyFile() string    { return filepath.Join(d.dir, "api-key") }
func (d daemon) apiURLFile() string    { return filepath.Join(d.dir, "api-url") }

// running is the daemon's PID when it is alive.
func (d daemon) running() int {
	b, err := os.ReadFile(d.pidFile())
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

func (d daemon) up() error {
	if pid := d.running(); pid != 0 {
		if exists(d.readyFile()) {
			return d.printReady()
		}
		return fmt.Errorf("a cluster is starting (pid %d); see %s, or `make down`", pid, d.logFile())
	}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(d.readyFile())
	logf, err := os.Create(d.logFile())
	if err != nil {
		return err
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "serve", "-dir", d.dir, "-nodes", strconv.Itoa(d.nodes), "-bin", d.bin, "-store", d.store)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Printf("starting a %d-node cluster (store %s) in %s (log: %s)\n", d.nodes, d.store, d.dir, d.logFile())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return d.waitReady(exited)
}

// waitReady follows the daemon's log until it is ready or gone.
func (d daemon) waitReady(exited chan error) error {
	shown := 0
	for {
		shown = d.showLog(shown)
		if exists(d.readyFile()) {
			return d.printReady()
		}
		select {
		case err := <-exited:
			d.showLog(shown)
			return fmt.Errorf("the cluster did not come up (%v); everything it started was undone", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// showLog prints the cluster's progress lines after offset.
func (d daemon) showLog(offset int) int {
	b, _ := os.ReadFile(d.logFile())
	if len(b) <= offset {
		return offset
	}
	for _, l := range strings.Split(strings.TrimRight(string(b[offset:]), "\n"), "\n") {
		if strings.Contains(l, "cluster:") {
			fmt.Println(l)
		}
	}
	return len(b)
}

func (d daemon) printReady() error {
	kc := filepath.Join(d.dir, "pki", "admin.kubeconfig")
	url, err := os.ReadFile(d.apiURLFile())
	if err != nil {
		return err
	}
	fmt.Printf(`
sandlot is running on a local cluster (state in %[1]s).
Try:
  export KUBECONFIG=%[2]s
  kubectl get nodes -o wide
  kubectl apply -f config/samples/quickstart.yaml
  kubectl get sbx hello -w                       # Running, with a pod IP
  kubectl exec hello -- uname -r                 # inside the microVM
  make down                                      # stop it and undo every host change
The E2B SDKs, unchanged (once the quickstart's template is ready):
  export E2B_API_URL=%[3]s E2B_SANDBOX_URL=%[3]s E2B_VOLUME_API_URL=%[3]s E2B_API_KEY=$(cat %[4]s)
kubeconfig: %[2]s
`, d.dir, kc, strings.TrimSpace(string(url)), d.apiKeyFile())
	return nil
}

// recordAPI writes where the chart's sandlot-api (the E2B API) answers —
// its Service, which kube-proxy routes on this host — and a key issued as
// the chart's NOTES say (in the API's pod) to apiURLFile and apiKeyFile.
func (d daemon) recordAPI(ctx context.Context, c *cluster.Cluster) error {
	url, err := c.APIURL(ctx)
	if err != nil {
		return err
	}
	key, err := c.IssueAPIKey(ctx, "--name=make-up")
	if err != nil {
		return fmt.Errorf("the API's key: %w", err)
	}
	return errors.Join(os.WriteFile(d.apiKeyFile(), []byte(key+"\n"), 0o600), os.WriteFile(d.apiURLFile(), []byte(url+"\n"), 0o644))
}

// serveControl answers requests of other processes (tests) to act on the
// cluster it runs, over controlSocket: POST /containerd/restart?node=N.
func (d daemon) serveControl(t crienv.T, c *cluster.Cluster) error {
	_ = os.Remove(d.controlSocket())
	l, err := net.Listen("unix", d.controlSocket())
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /containerd/restart", func(w http.ResponseWriter, r *http.Request) {
		if err := c.RestartContainerd(r.URL.Query().Get("node")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close(); _ = os.Remove(d.controlSocket()) })
	return nil
}

// restartContainerd asks the running cluster to restart a node's containerd.
func (d daemon) restartContainerd(node string) error {
	if node == "" {
		return errors.New("usage: cluster restart-containerd NODE")
	}
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.controlSocket())
	}}}
	resp, err := hc.Post("http://cluster/containerd/restart?node="+url.QueryEscape(node), "", nil)
	if err != nil {
		return fmt.Errorf("is a cluster running (%s)? %w", d.controlSocket(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("restart containerd on %s: %s", node, strings.TrimSpace(string(msg)))
	}
	fmt.Printf("containerd on %s restarted\n", node)
	return nil
}

// serve runs the cluster until SIGTERM or SIGINT, then undoes it.
func (d daemon) serve() error {
	if err := os.WriteFile(d.pidFile(), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(d.pidFile())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Printf("%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	before := cluster.SnapshotHost()
	err := crienv.Run("cluster", func(t crienv.T) {
		c := cluster.Start(t, cluster.Options{Dir: d.dir, Nodes: d.nodes, BinDir: d.bin, Logf: logf, MinIO: true,
			Interpreter: true, ClusterDNS: true, JuiceFSCSI: d.store == "juicefs",
			// E2B volumes on a directory both nodes (this machine) mount.
			Values: map[string]any{"volumes": map[string]any{"hostPath": filepath.Join(d.dir, "volumes")}}})
		if err := d.recordAPI(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := d.serveControl(t, c); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(d.readyFile(), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		_ = os.Remove(d.readyFile())
		logf("cluster: stopping")
	})
	if diff := waitClean(before); len(diff) > 0 {
		err = errors.Join(err, fmt.Errorf("cluster: the host is not as before:\n%s", strings.Join(diff, "\n")))
	}
	logf("cluster: stopped, host changes undone")
	return err
}

// waitClean compares the host with its state before the cluster, giving
// exiting processes a moment.
func waitClean(before cluster.HostState) []string {
	deadline := time.Now().Add(20 * time.Second)
	for {
		diff := before.Diff(cluster.SnapshotHost())
		if len(diff) == 0 || time.Now().After(deadline) {
			return diff
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (d daemon) down() error {
	pid := d.running()
	if pid == 0 {
		if !exists(filepath.Join(d.dir, "baseline")) {
			fmt.Println("no cluster is running")
			return nil
		}
		// Its owner died without cleaning up (SIGKILL, a crash).
		fmt.Println("no cluster process; sweeping what a dead one left in", d.dir)
		if err := cluster.Sweep(d.dir); err != nil {
			return err
		}
		_ = os.Remove(d.readyFile())
		if err := os.RemoveAll(filepath.Join(d.dir, "baseline")); err != nil {
			return err
		}
		return d.removeData()
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	fmt.Printf("stopping the cluster (pid %d)...\n", pid)
	deadline := time.Now().Add(3 * time.Minute)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			return errors.New("the cluster did not stop within 3 minutes; see " + d.logFile())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// What the teardown said (errors included) is at the log's end.
	b, _ := os.ReadFile(d.logFile())
	if i := strings.LastIndex(string(b), "cluster: stopping"); i >= 0 {
		fmt.Print(string(b[i:]))
	}
	if !strings.Contains(string(b), "cluster: stopped") || strings.Contains(string(b), "cluster: cluster:") {
		return errors.New("the teardown reported errors (above)")
	}
	return d.removeData()
}

// clusterData is what a cluster keeps in its directory besides its logs.
var clusterData = []string{"etcd", "minio", "jfs", "kcm", "pki", "Corefile", "kube-proxy.yaml", "api-key", "api-url",
	"sandlot-node-*", "volumes"}

// removeData deletes a stopped cluster's state (etcd, MinIO's bucket, each
// node's containerd root and store: ~20 GiB after make e2e) and keeps its
// logs. The next up starts a new cluster and reads none of it, and a
// machine that runs make test after make down needs the space (JuiceFS
// stages writes only above 10% free). Only the names a cluster makes go:
// the directory may be one a user chose (SANDLOT_CLUSTER_DIR).
func (d daemon) removeData() error {
	for _, pattern := range clusterData {
		paths, err := filepath.Glob(filepath.Join(d.dir, pattern))
		if err != nil {
			return err
		}
		for _, p := range paths {
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("remove the stopped cluster's %s: %w", p, err)
			}
		}
	}
	return nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return n
	}
	return def
}
