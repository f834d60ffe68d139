// Command sandlot-api serves the E2B-compatible REST API over sandlot's
// CRDs and proxies the SDKs' sandbox traffic to sandbox pods.
//
//	sandlot-api [flags]            serve
//	sandlot-api issue-key [flags]  add a new API key to the keys Secret (its hash) and print it
//	sandlot-api issue-token [flags] add an access token of a team (manages its keys and tokens) and print it
//	sandlot-api hash-key           print the value a keys Secret stores for the key on stdin
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/e2b"
	"github.com/sandlot-dev/sandlot/internal/version"
)

func main() {
	if version.Requested(os.Args[1:]) {
		version.Print(os.Stdout, "sandlot-api")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "issue-key":
		err = issueKey(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "issue-token":
		err = issueToken(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "hash-key":
		err = hashKey(os.Stdin, os.Stdout)
	default:
		err = serve(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandlot-api:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, args []string) error {
	cfg, lf, err := parseServeFlags(args)
	if err != nil {
		return err
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctrl.SetLogger(logr.FromSlogHandler(cfg.Log.Handler())) // the client and cache log through it too

	rest, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	// The cache and the requests outlive the signal (see shutdown): run
	// ends after the servers are down.
	run, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	kube, err := e2b.NewKube(run, rest, cfg.Namespaces()...)
	if err != nil {
		return fmt.Errorf("watch namespace %s: %w", cfg.Namespace, err)
	}
	errs := make(chan error, 3)
	api := e2b.New(cfg, kube)
	if n, err := api.HashStoredKeys(ctx); err != nil {
		cfg.Log.Error("API keys stored in plain text stay so", "error", err, "hashed", n)
	} else if n > 0 {
		cfg.Log.Info("API keys stored in plain text replaced by their hashes", "keys", n)
	}
	go api.CollectBuildFiles(ctx) // uploads no build needs, and lapsed build requests
	go api.SampleTeams(ctx)       // the teams' metrics (GET /teams/{teamID}/metrics)
	go api.KeepVolumes(ctx)       // volumes' directories: made for new ones, removed for deleted ones
	if lf.metricsListenUsed {
		cfg.Log.Warn("--metrics-listen is deprecated: use --metrics-bind-address")
	}
	metrics, metricsTLS, err := metricsHandler(lf, rest)
	if err != nil {
		return err
	}
	requests, cancelRequests := context.WithCancel(run)
	defer cancelRequests()
	var inflight sync.WaitGroup
	servers := startServers(lf, track(api, &inflight), metrics, metricsTLS, errs, requests)
	cfg.Log.Info("serving the E2B API", "listen", lf.listen, "tls", lf.tlsListen, "namespace", cfg.Namespace, "domain", cfg.Domain,
		"createRate", cfg.CreateRate, "createBurst", cfg.CreateBurst, "metrics", lf.metricsListen, "metricsSecure", lf.secureMetrics)
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	// Deliberate: closing the listener at the signal refused every
	// client until the next pod was Ready (make soak: the API pod deleted).
	time.Sleep(lameDuck)
	shutdown(servers, cancelRequests, &inflight, drainTimeout, cleanupTimeout)
	return nil
}

// Within the pod's 30 s termination grace: the API keeps accepting for
// lameDuck (the Service still sends new connections here until the
// endpoint update reaches every node; with one replica it keeps sending
// them until the next pod is Ready), then requests in flight get
// drainTimeout to finish, then their contexts end and they get
// cleanupTimeout to clean up after themselves.
const (
	lameDuck       = 5 * time.Second
	drainTimeout   = 15 * time.Second
	cleanupTimeout = 8 * time.Second
)

// shutdown stops the servers without cutting a request short: a create
// waiting for its sandbox answers (its cache still runs), and one still
// waiting after drain is cancelled and deletes the sandbox it made
// (within cleanup). Exiting under it left a running sandbox whose ID no
// client had (found by make soak deleting the API pod).
func shutdown(servers []*http.Server, cancelRequests context.CancelFunc, inflight *sync.WaitGroup, drain, cleanup time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() { _ = s.Shutdown(ctx) })
	}
	wg.Wait()
	cancelRequests()
	done := make(chan struct{})
	go func() { inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cleanup):
	}
}

// track counts the requests in flight.
func track(h http.Handler, inflight *sync.WaitGroup) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inflight.Add(1)
		defer inflight.Done()
		h.ServeHTTP(w, r)
	})
}

// parseServeFlags is serve's configuration, checked.
func parseServeFlags(args []string) (e2b.Config, listenFlags, error) {
	fs := flag.NewFlagSet("sandlot-api", flag.ExitOnError)
	var cfg e2b.Config
	var lf listenFlags
	fs.StringVar(&lf.listen, "listen", ":3000", "address of the API and the sandbox proxy (plain HTTP)")
	fs.StringVar(&lf.tlsListen, "tls-listen", "", "address of the same over TLS (with --tls-cert and --tls-key): the SDK's domain mode speaks https")
	fs.StringVar(&lf.tlsCert, "tls-cert", "", "certificate for *.<domain> (PEM)")
	fs.StringVar(&lf.tlsKey, "tls-key", "", "its key (PEM)")
	metricsFlags(fs, &lf)
	fs.StringVar(&cfg.Namespace, "namespace", "default", "namespace of the sandboxes, snapshots and templates served")
	fs.Func("teams", "namespaces of the other teams served, comma-separated (each team's keys: a Secret in --namespace labelled "+
		e2b.LabelTeam+"=<team>)", func(v string) error {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				cfg.Teams = append(cfg.Teams, t)
			}
		}
		return nil
	})
	fs.StringVar(&cfg.DefaultTemplate, "default-template", "default", "Template the SDKs' default IDs (base, code-interpreter-v1) resolve to")
	fs.StringVar(&cfg.Domain, "domain", "", "sandbox domain returned to SDKs: port p of a sandbox is <p>-<sandboxID>.<domain> (may carry :port)")
	fs.StringVar(&cfg.VolumeDir, "volume-dir", "", "the volume storage every node mounts, at the same path here (E2B volumes; empty: none)")
	fs.StringVar(&cfg.KeysSecret, "keys-secret", "sandlot-api-keys", "Secret whose values are the API keys")
	fs.DurationVar(&cfg.CreateTimeout, "create-timeout", 2*time.Minute, "bound of a create, resume, fork or rollback")
	fs.DurationVar(&cfg.PauseTimeout, "pause-timeout", 2*time.Minute, "bound of a pause")
	fs.DurationVar(&cfg.SnapshotTimeout, "snapshot-timeout", 5*time.Minute, "bound of a snapshot")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 1<<20, "largest API request body (proxied bodies are not bounded)")
	limitFlags(fs, &cfg)
	buildFilesFlags(fs, &cfg)
	netCfg := egressFlags(fs)
	_ = fs.Parse(args)
	egress, err := netCfg.Egress()
	if err != nil {
		return cfg, lf, fmt.Errorf("--deny-out, --open-out: %w", err)
	}
	cfg.Egress = egress
	return cfg, lf, checkFlags(lf, &cfg)
}

// limitFlags are the per-key create and per-team operation rate limits.
func limitFlags(fs *flag.FlagSet, cfg *e2b.Config) {
	fs.Float64Var(&cfg.CreateRate, "create-rate", defaultCreateRate,
		"sandboxes an API key may create a second on average (creates and each of a fork's); 0: no limit")
	fs.IntVar(&cfg.CreateBurst, "create-burst", defaultCreateBurst, "sandboxes an API key may create at once (with --create-rate > 0)")
	fs.Float64Var(&cfg.OperationRate, "operation-rate", defaultOperationRate,
		"snapshots, pauses, resumes and template builds a team may ask for a second on average; 0: no limit")
	fs.IntVar(&cfg.OperationBurst, "operation-burst", defaultOperationBurst,
		"snapshots, pauses, resumes and template builds a team may ask for at once (with --operation-rate > 0)")
}

// egressFlags are the platform's egress policy the nodes enforce (the
// chart passes both its network values): an allowOut inside a denial is
// refused here.
func egressFlags(fs *flag.FlagSet) *node.NetworkConfig {
	var n node.NetworkConfig
	fs.Func("deny-out", "the platform's denials the nodes enforce (the chart's network.denyOut), comma-separated: "+
		"an allowOut inside them is refused (default: the nodes' default)", func(v string) error {
		n.DenyOut = node.SplitList(v)
		return nil
	})
	fs.Func("open-out", "ranges inside --deny-out an allowOut may open (the chart's network.openOut), comma-separated", func(v string) error {
		n.OpenOut = node.SplitList(v)
		return nil
	})
	return &n
}

// listenFlags are where sandlot-api serves.
type listenFlags struct {
	listen, tlsListen, tlsCert, tlsKey, metricsListen string
	secureMetrics                                     bool
	// metricsListenUsed: the deprecated --metrics-listen was given.
	metricsListenUsed bool
}

// startServers serves handler, and metrics when not nil, on lf's
// listeners; a listener that fails says so on errs.
func startServers(lf listenFlags, handler, metrics http.Handler, metricsTLS *tls.Config, errs chan<- error, requests context.Context) []*http.Server {
	run := func(srv *http.Server, serve func() error) {
		if err := serve(); err != nil {
			errs <- fmt.Errorf("serve %s: %w", srv.Addr, err)
		}
	}
	// The API and proxy listeners carry long-lived envd streams: only
	// header and idle bounds there (the REST API bounds its own calls).
	base := func(net.Listener) context.Context { return requests }
	srv := e2b.NewHTTPServer(lf.listen, handler, e2b.ProxyTimeouts)
	srv.BaseContext = base
	servers := []*http.Server{srv}
	go run(srv, srv.ListenAndServe)
	if lf.tlsListen != "" {
		srv := e2b.NewHTTPServer(lf.tlsListen, handler, e2b.ProxyTimeouts)
		srv.BaseContext = base
		servers = append(servers, srv)
		go run(srv, func() error { return srv.ListenAndServeTLS(lf.tlsCert, lf.tlsKey) })
	}
	if metrics != nil {
		// Scrapes never stream: every bound applies.
		srv := e2b.NewHTTPServer(lf.metricsListen, metrics, e2b.Timeouts{ReadHeader: e2b.ReadHeaderTimeout,
			Read: e2b.MetricsTimeout, Write: e2b.MetricsTimeout, Idle: e2b.IdleTimeout})
		servers = append(servers, srv)
		if metricsTLS != nil {
			srv.TLSConfig = metricsTLS
			go run(srv, func() error { return srv.ListenAndServeTLS("", "") })
		} else {
			go run(srv, srv.ListenAndServe)
		}
	}
	return servers
}

// The default create limit: a client starting sandboxes for a batch gets
// 20 at once and 10 a second after, while a leaked key or a runaway loop
// cannot fill the cluster's nodes in seconds.
const (
	defaultCreateRate  = 10
	defaultCreateBurst = 20
)

// The default limit on a team's snapshots, pauses, resumes and builds
// (each writes a VM's memory or disk to its node and the store): 30 at
// once, then 5 a second, so an agent's burst of checkpoints passes and a
// loop cannot keep every node snapshotting.
const (
	defaultOperationRate  = 5
	defaultOperationBurst = 30
)

func checkFlags(lf listenFlags, cfg *e2b.Config) error {
	if (lf.tlsListen != "") != (lf.tlsCert != "" && lf.tlsKey != "") {
		return errors.New("--tls-listen needs --tls-cert and --tls-key, and they need it")
	}
	if cfg.CreateRate < 0 || math.IsNaN(cfg.CreateRate) || math.IsInf(cfg.CreateRate, 0) {
		return fmt.Errorf("--create-rate %v: want a number of creates a second, 0 for no limit", cfg.CreateRate)
	}
	if cfg.CreateRate > 0 && cfg.CreateBurst < 1 {
		return fmt.Errorf("--create-burst %d: want at least 1 with --create-rate %v", cfg.CreateBurst, cfg.CreateRate)
	}
	if cfg.OperationRate < 0 || math.IsNaN(cfg.OperationRate) || math.IsInf(cfg.OperationRate, 0) ||
		(cfg.OperationRate > 0 && cfg.OperationBurst < 1) {
		return fmt.Errorf("--operation-rate %v, --operation-burst %d: want a number a second (0 for no limit) and a burst of at least 1",
			cfg.OperationRate, cfg.OperationBurst)
	}
	return checkBuildFilesFlags(cfg)
}
