// Command sandlot-agent is sandlot's node agent: the node-side work for
// the Snapshots and pause packages assigned to its node, the data its
// shims restore from, and VMReady on its sandboxes.
//
//	sandlot-agent [flags]                          run the agent
//	sandlot-agent install [flags] -- restart...    put the shim, guest assets and runtime on the node
//	sandlot-agent uninstall [flags] -- restart...  take them off again
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	nodeapi "github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/internal/version"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/cmd/internal/metricsflag"
	"github.com/sandlot-dev/sandlot/nodeagent"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

func main() {
	if version.Requested(os.Args[1:]) {
		version.Print(os.Stdout, "sandlot-agent")
		return
	}
	ctx := ctrl.SetupSignalHandler()
	sub := ""
	if len(os.Args) > 1 {
		sub = os.Args[1]
	}
	var err error
	switch sub {
	case "install":
		err = installCmd(ctx, os.Args[2:])
	case "uninstall":
		err = uninstallCmd(ctx, os.Args[2:])
	case "hold-volume":
		err = holdCmd(ctx, os.Args[2:])
	default:
		err = run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandlot-agent:", err)
		os.Exit(1)
	}
}

// storeFlags configure the snapshot store.
type storeFlags struct {
	kind, dir string
	s3        store.S3Config
	juicefs   store.JuiceFSConfig
	// keyFile and previousKeyFile hold the cluster's manifest keys.
	keyFile, previousKeyFile string
}

func (f *storeFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.kind, "store", "local", "snapshot store backend: local, s3 or juicefs")
	fs.StringVar(&f.dir, "store-dir", "/var/lib/sandlot/store", "local: the store; s3: this node's cache of the store")
	fs.StringVar(&f.s3.Endpoint, "s3-endpoint", "", "s3: host:port or URL of an S3-compatible endpoint")
	fs.StringVar(&f.s3.Bucket, "s3-bucket", "", "s3: the bucket")
	fs.StringVar(&f.s3.Prefix, "s3-prefix", "", "s3: prefix of every object name")
	fs.StringVar(&f.s3.Region, "s3-region", "", "s3: region (empty asks the server)")
	fs.BoolVar(&f.s3.Insecure, "s3-insecure", false, "s3: plain HTTP to a host:port endpoint")
	fs.DurationVar(&f.s3.Deadline, "s3-upload-deadline", time.Hour, "s3: an upload that has not succeeded by then is Failed (nothing is deleted)")
	fs.DurationVar(&f.s3.MaxBackoff, "s3-max-backoff", time.Minute, "s3: longest wait between upload attempts")
	fs.Int64Var(&f.s3.CacheMaxBytes, "s3-cache-max-bytes", 0, "s3: cap on this node's copies of data complete in the bucket (downloads, and its own once uploaded); the least recently used unopened ones are evicted and downloaded again when needed (0: --s3-cache-max-disk-percent)")
	fs.IntVar(&f.s3.CacheMaxDiskPercent, "s3-cache-max-disk-percent", 50, "s3: with --s3-cache-max-bytes=0, the cap as a percentage of --store-dir's filesystem (0: unbounded)")
	fs.StringVar(&f.juicefs.MountDir, "juicefs-dir", "", "juicefs: the JuiceFS CSI mount shared by the nodes (a glob matching one directory, such as the kubelet's mount of the agent pod's PVC, is resolved at start)")
	fs.StringVar(&f.juicefs.MetricsURL, "juicefs-metrics-url", "", "juicefs (optional): the client's metrics endpoint; a snapshot whose blocks stay staged says how many object requests failed")
	fs.StringVar(&f.juicefs.StagingDir, "juicefs-staging-dir", "", "juicefs (required): the client's <cache-dir>/<UUID>/rawstaging: a snapshot is remote Ready once none of its blocks is left there")
	fs.BoolVar(&f.juicefs.VerifyContent, "juicefs-verify-content", false, "juicefs: hash every file of a snapshot on a node's first restore from it, besides checking its signed object layout (defends against a writer of the bucket itself when the volume is not encrypted; reads the whole snapshot up front)")
	fs.DurationVar(&f.juicefs.UploadDeadline, "juicefs-upload-deadline", time.Hour, "juicefs: a snapshot whose blocks are still staged by then is remote Failed (the client keeps them and retries)")
	fs.StringVar(&f.keyFile, "manifest-key-file", "", "s3, juicefs (required): the cluster's key (a file from a Secret, the same on every node) that signs what this node puts in the shared store and verifies what it restores from it")
	fs.StringVar(&f.previousKeyFile, "manifest-previous-key-file", "", "s3, juicefs: a key also accepted when verifying, never used to sign (a rotation; a missing file is none)")
}

// keys reads the keys a shared store signs and verifies with. Without
// them whoever can write the bucket or the volume would pick what this
// node's QEMU opens, so the agent does not start.
func (f *storeFlags) keys() (*store.Keys, error) {
	if f.keyFile == "" {
		return nil, fmt.Errorf("--manifest-key-file is required with --store=%s: the nodes sign what they put in the shared store and verify what they restore from it with a key they share (the chart mounts one from the Secret sandlot-manifest-key)", f.kind)
	}
	k, err := store.ReadKeys(f.keyFile, f.previousKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--manifest-key-file: %w", err)
	}
	ids := k.IDs()
	ctrl.Log.WithName("store").Info("manifest keys (their IDs)", "signing", ids[0], "alsoAccepted", ids[1:])
	return k, nil
}

// open makes the store; shared says other nodes restore from it.
func (f *storeFlags) open(ctx context.Context, node string) (st store.Store, shared bool, err error) {
	switch f.kind {
	case "local":
		st, err = store.NewLocal(f.dir)
		return st, false, err
	case "s3":
		if f.s3.Keys, err = f.keys(); err != nil {
			return nil, false, err
		}
		f.s3.CacheRoot, f.s3.Node = f.dir, node
		// Credentials come from the environment (a Secret in the DaemonSet).
		f.s3.AccessKey, f.s3.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		f.s3.Logf = logf("s3")
		s3, err := store.NewS3(f.s3)
		if err != nil {
			return nil, false, err
		}
		return s3, true, s3.Resume(ctx)
	case "juicefs":
		if f.juicefs.MountDir, err = awaitGlob(ctx, f.juicefs.MountDir, 2*time.Minute); err != nil {
			return nil, false, fmt.Errorf("--juicefs-dir: %w", err)
		}
		if f.juicefs.Keys, err = f.keys(); err != nil {
			return nil, false, err
		}
		f.juicefs.Node, f.juicefs.Logf = node, logf("juicefs")
		j, err := store.NewJuiceFS(f.juicefs)
		if err != nil {
			return nil, false, err
		}
		return j, true, j.Resume(ctx)
	}
	return nil, false, fmt.Errorf("--store %q: want local, s3 or juicefs", f.kind)
}

func logf(name string) func(string, ...any) {
	l := ctrl.Log.WithName("store").WithName(name)
	return func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
}

func run(ctx context.Context) error {
	var probeAddr string
	var stf storeFlags
	var node nodeagent.Node
	flag.StringVar(&node.Name, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	flag.StringVar(&node.SandlotRoot, "sandlot-root", nodeapi.DefaultRoot, "the shims' <root> (the runtime option in containerd's config)")
	flag.StringVar(&node.StageSocket, "stage-socket", "", "where shims ask for data to restore (default <sandlot-root>/agent.sock)")
	flag.StringVar(&node.PodIP, "pod-ip", os.Getenv("POD_IP"), "the agent's own pod address (default $POD_IP): the shims admit it, as a template build reaches its builder's guest from it")
	apiService := flag.String("api-service", "", "sandlot-api's Service as namespace/name: its pods may open connections to the sandboxes (empty: only the node may)")
	hostRoot := flag.String("host-root", "", "where the node's / is mounted when the agent runs in a container (its QEMU is fingerprinted there)")
	qemu := flag.String("qemu", "", "the node's QEMU, as the shims run it (default qemu-system-x86_64 on the PATH)")
	shimConfig := flag.String("shim-config", "", "the shims' config on the node (read under --host-root): the digest of the guest kernel and initramfs it names is published on the Node (empty: none)")
	stf.bind(flag.CommandLine)
	metrics := metricsflag.Bind(flag.CommandLine, "0")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8082", "address of /healthz and /readyz")
	logOpts := zap.Options{}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	if node.Name == "" {
		return fmt.Errorf("--node-name (or $NODE_NAME) is required")
	}
	if node.StageSocket == "" {
		node.StageSocket = nodeapi.Layout{Root: node.SandlotRoot}.StageSocket()
	}
	if a, err := netip.ParseAddr(node.PodIP); node.PodIP != "" && (err != nil || !a.Is4()) {
		return fmt.Errorf("--pod-ip %q: want an IPv4 address (the shims admit IPv4 sources)", node.PodIP)
	}
	if *apiService != "" {
		ns, name, ok := strings.Cut(*apiService, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--api-service %q: want namespace/name", *apiService)
		}
		node.APIService = types.NamespacedName{Namespace: ns, Name: name}
	}
	var err error
	if node.Store, node.SharedStore, err = stf.open(ctx, node.Name); err != nil {
		return fmt.Errorf("store %s: %w", stf.kind, err)
	}
	if c, ok := node.Store.(io.Closer); ok {
		defer c.Close()
	}
	fp, err := nodeagent.Fingerprint(*hostRoot, *qemu)
	if err != nil {
		return err
	}
	if node.ClaimKey, err = nodeagent.LoadClaimKey(nodeagent.ClaimKeyPath(node.SandlotRoot)); err != nil {
		return err
	}
	guest := ""
	if *shimConfig != "" {
		if guest, err = nodeagent.GuestDigest(*hostRoot, *shimConfig); err != nil {
			return err
		}
	}
	return serve(ctx, node, fp, guest, metrics.Options(), probeAddr)
}

// serve runs the agent's manager for node, once its fingerprint and
// guest are published on the Node.
func serve(ctx context.Context, node nodeagent.Node, fp sandlotv1.Fingerprint, guest string, metrics metricsserver.Options, probeAddr string) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, sandlotv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: nodeagent.CacheOptions(node.Name, node.APIService),
		Metrics: metrics, HealthProbeBindAddress: probeAddr})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := nodeagent.Setup(mgr, node); err != nil {
		return err
	}
	// The manager's client is not readable before Start: a direct client.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := nodeagent.PublishFingerprint(ctx, direct, node.Name, fp, node.ClaimKey.PublicBase64(), guest); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
