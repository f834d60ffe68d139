// Package cluster runs a real Kubernetes cluster on this machine: the one
// `make up` starts (hack/cluster), and the ones the cluster suites under
// test/ start for themselves. etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kube-proxy (iptables mode) built from Go modules, and
// one or two nodes, each a kubelet on its own containerd (internal/crienv)
// with the sandlot runtime, and sandlot installed with its Helm chart — the
// only way a test runs sandlot's components, so what is tested is what a user
// installs. Every address is on the cluster's own bridges; service traffic
// without a rule dies on the API bridge; stopping it undoes every host change.
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/juicefs"
	"github.com/sandlot-dev/sandlot/internal/minio"
)

// Versions of what the cluster runs (built by hack/k8s-bins.sh and
// hack/containerd-bins.sh into the cache).
const (
	K8sVersion  = "v1.37.2"
	ServiceCIDR = "10.0.0.0/24"
	// NodeMonitorGracePeriod: a node whose kubelet stops is NotReady after it.
	NodeMonitorGracePeriod = 20 * time.Second
)

// Options shape a cluster.
type Options struct {
	// Dir holds all state (short: unix socket paths live under it).
	Dir   string
	Nodes int // 1 or 2
	// Prefix is the first two octets of every cluster address: the API
	// bridge is <prefix>.0.1, node i's pod network <prefix>.<i>.0/24.
	Prefix string
	// BinDir holds the binaries (Build) and BinDir/images the chart's
	// images (BuildImages): sandlot is installed with its Helm chart, as
	// on any cluster, and only so.
	BinDir string
	// Values are chart values laid over the local cluster's (ChartValues):
	// a suite's own settings (agent flags, API settings, a store).
	Values map[string]any
	Logf   func(format string, args ...any)
	// APIDomain, when set, is the API's sandbox domain (E2B's domain
	// mode): a wildcard certificate for *.<APIDomain> from the cluster's
	// CA is the chart's api.tls Secret, served on the API Service's 443.
	APIDomain string
	// Teams are namespaces the API serves besides default (the chart's
	// api.teams: created, with the API's rights in them).
	Teams []string
	// Interpreter imports the code-interpreter image into every node too
	// (make vm-assets builds it): the E2B tests' and `make up`'s templates.
	Interpreter bool
	// MinIO runs a MinIO server on the API bridge (pods reach it) as the
	// s3 store every node shares (the chart's storage.mode s3).
	MinIO bool
	// DNS, when set, are the pods' nameservers (a resolv.conf of its own
	// for every kubelet) instead of the host's /etc/resolv.conf; with
	// ClusterDNS, CoreDNS's upstreams.
	DNS []string
	// ClusterDNS runs CoreDNS behind the kube-dns Service (DNSServiceIP),
	// the pods' nameserver: cluster names resolve (dns.go).
	ClusterDNS bool
	// JuiceFSCSI (with MinIO) installs the chart with the juicefs
	// store on a live JuiceFS volume (Redis on the API bridge, a bucket on
	// the cluster's MinIO) mounted through the JuiceFS CSI driver, as
	// docs/install.md tells a bare-metal user (juicefs.go).
	JuiceFSCSI bool
	// JuiceFSMountOptions are added to the store volume's mount options
	// (a StorageClass's mountOptions on a real cluster).
	JuiceFSMountOptions []string
	// Release, when set, is a release folder (make release) installed
	// instead of this checkout: its images pushed to the cluster's
	// registry, its packaged chart. UpgradeToCheckout moves to this one.
	Release string
	// Fleet: the cluster's nodes run sandlot's control plane only (no
	// sandbox runtime label, no agent), and kube-controller-manager runs
	// without its node lifecycle controller — the sandbox nodes are a
	// simulated fleet's Node objects (test/scale), which no kubelet
	// heartbeats.
	Fleet bool
}

// S3Store is an S3-compatible endpoint the node agents share.
type S3Store struct {
	Endpoint, Bucket, AccessKey, SecretKey, Region string
}

// Cluster is a running cluster.
type Cluster struct {
	Options
	Kubeconfig string // admin
	APIServer  string // https://<ip>:6443
	Nodes      []*Node
	PKI        *PKI
	// MinIOServer is the MinIO the MinIO option runs (tests stop it).
	MinIOServer *minio.Server
	// S3 is MinIOServer's bucket as the agents' store.
	S3 *S3Store
	// JuiceFSVolume is the JuiceFSCSI option's volume (tests restart its Redis).
	JuiceFSVolume *juicefs.Volume

	apiIP     string
	apiBridge string
	// guestModules are the guest's modules in the initramfs make vm-assets
	// built (the chart's agent.install.guestModules).
	guestModules string
	k8sBin       string
	procs        map[string]*proc
	clientset    *kubernetes.Clientset
	t            crienv.T // the cluster's lifetime: what it starts stops with it
}

// Node is one kubelet and its containerd.
type Node struct {
	Name string
	IP   string // the kubelet's address: its pod bridge's gateway
	CRI  *crienv.Env
	// SandlotRoot is the shim's <root> on this node (control sockets).
	SandlotRoot string
	kubelet     *proc
	dir         string
}

// Start brings the cluster up; t's cleanups take it down again.
func Start(t crienv.T, o Options) *Cluster {
	t.Helper()
	c, err := newCluster(o)
	if err != nil {
		t.Fatal(err)
	}
	c.t = t
	began := time.Now()
	steps := []struct {
		name string
		fn   func(crienv.T) error
	}{
		{"host checks", c.preflight},
		{"shared mounts", c.sharedDir},
		{"pki", c.pki},
		{"api bridge", c.bridge},
		{"registry", c.registry},
		{"minio", c.minio},
		{"juicefs volume", c.juicefsVolume},
		{"etcd", c.etcd},
		{"kube-apiserver", c.apiserver},
		{"service route", c.serviceRoute},
		{"controller-manager and scheduler", c.controllers},
		{"cluster dns", c.clusterDNS},
		{"nodes", c.nodes},
		// kube-proxy waits for its Node (it reads the node's IPs).
		{"kube-proxy", c.proxy},
		{"juicefs csi driver", c.juicefsCSI},
		{"sandlot (helm install)", c.installChart},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(t); err != nil {
			t.Fatalf("cluster: %s: %v", s.name, err)
		}
		c.logf("cluster: %s ready in %v", s.name, time.Since(start).Round(time.Millisecond))
	}
	c.logf("cluster: up in %v; kubeconfig %s", time.Since(began).Round(time.Millisecond), c.Kubeconfig)
	return c
}

func newCluster(o Options) (*Cluster, error) {
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.Nodes < 1 || o.Nodes > 2 {
		return nil, fmt.Errorf("cluster: %d nodes: want 1 or 2", o.Nodes)
	}
	if o.Prefix == "" {
		o.Prefix = "10.246"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Dir == "" || !filepath.IsAbs(o.Dir) {
		return nil, fmt.Errorf("cluster: Dir %q must be an absolute path", o.Dir)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{Options: o, apiIP: o.Prefix + ".0.1", procs: map[string]*proc{}}
	c.APIServer = "https://" + c.apiIP + ":6443"
	c.apiBridge = "slapi" + shortHash(o.Dir)
	c.k8sBin = filepath.Join(cacheDir(), "k8s", K8sVersion)
	return c, nil
}

func (c *Cluster) logf(format string, args ...any) { c.Logf(format, args...) }

// cacheDir is $SANDLOT_CACHE (default ~/.cache/sandlot).
func cacheDir() string {
	if d := os.Getenv("SANDLOT_CACHE"); d != "" {
		return d
	}
	return filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
}

// preflight fails early, naming what to install or build.
func (c *Cluster) preflight(t crienv.T) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: the cluster makes bridges, routes, iptables rules and cgroups")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(c.k8sBin, b)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make cluster-bins`", b, c.k8sBin)
		}
	}
	if _, err := os.Stat(filepath.Join(c.BinDir, "containerd-shim-sandlot-v2")); err != nil {
		return fmt.Errorf("containerd-shim-sandlot-v2 not found in %s: run `make build`", c.BinDir)
	}
	for _, name := range ImageNames {
		if _, err := os.Stat(filepath.Join(c.BinDir, "images", name+".tar")); err != nil {
			return fmt.Errorf("%w: run `make image` (or cluster.BuildImages)", err)
		}
	}
	for _, tool := range []string{"iptables-save", "iptables-restore", "ip", "kubectl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: install iptables, iproute2 and kubectl", tool)
		}
	}
	out, err := exec.Command("iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables-save -t nat: %w: %s", err, out)
	}
	if strings.Contains(string(out), ":KUBE-SERVICES ") {
		return fmt.Errorf("another cluster's kube-proxy rules are on this host (KUBE-SERVICES exists): `make down` it first")
	}
	return c.saveBaseline(t)
}

// pki writes the certificates and kubeconfigs.
func (c *Cluster) pki(crienv.T) error {
	var nodes []NodeIdentity
	for i := 1; i <= c.Options.Nodes; i++ {
		nodes = append(nodes, NodeIdentity{Name: NodeName(i), IP: c.nodeIP(i)})
	}
	p, err := GeneratePKI(PKIConfig{Dir: filepath.Join(c.Dir, "pki"), APIServer: c.apiIP, Nodes: nodes})
	if err != nil {
		return err
	}
	c.PKI, c.Kubeconfig = p, p.Admin
	return nil
}

// NodeName is the name of the cluster's node i (1, 2, ...).
func NodeName(i int) string            { return fmt.Sprintf("sandlot-node-%d", i) }
func (c *Cluster) nodeIP(i int) string { return fmt.Sprintf("%s.%d.1", c.Prefix, i) }

// bridge makes the API server's bridge; every kubeconfig points at its
// gateway address, which host and pods reach.
func (c *Cluster) bridge(t crienv.T) error {
	if err := crienv.MakeBridge(c.apiBridge, c.apiIP+"/24"); err != nil {
		return err
	}
	t.Cleanup(func() {
		if err := run("ip", "link", "del", c.apiBridge); err != nil {
			t.Errorf("cluster: %v", err)
		}
	})
	return nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startProc starts a cluster process and stops it in cleanup.
func (c *Cluster) start(t crienv.T, name, bin string, args []string, env ...string) (*proc, error) {
	p, err := startProc(c.Dir, name, bin, args, env)
	if err != nil {
		return nil, err
	}
	c.procs[name] = p
	t.Cleanup(func() { p.stop(15 * time.Second) })
	return p, nil
}

func (c *Cluster) etcd(t crienv.T) error {
	// Every start is a fresh cluster: no objects from an earlier run.
	if err := os.RemoveAll(filepath.Join(c.Dir, "etcd")); err != nil {
		return err
	}
	client, peer := "http://"+c.apiIP+":2379", "http://"+c.apiIP+":2380"
	p, err := c.start(t, "etcd", filepath.Join(c.k8sBin, "etcd"), []string{
		"--name", "default", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default=" + peer, "--unsafe-no-fsync",
		"--listen-metrics-urls", "http://" + c.apiIP + ":2381",
	})
	if err != nil {
		return err
	}
	return p.waitFor(30*time.Second, "/health", func() error { return httpOK(client + "/health") })
}

func (c *Cluster) apiserver(t crienv.T) error {
	p := c.PKI
	proc, err := c.start(t, "kube-apiserver", filepath.Join(c.k8sBin, "kube-apiserver"), []string{
		"--etcd-servers=http://" + c.apiIP + ":2379",
		"--bind-address=" + c.apiIP, "--advertise-address=" + c.apiIP, "--secure-port=6443",
		"--tls-cert-file=" + p.APIServerCert, "--tls-private-key-file=" + p.APIServerKey, "--client-ca-file=" + p.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPub, "--service-account-signing-key-file=" + p.SAKey,
		"--service-cluster-ip-range=" + ServiceCIDR, "--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--kubelet-client-certificate=" + p.KubeletClientCert, "--kubelet-client-key=" + p.KubeletClientKey,
		"--kubelet-certificate-authority=" + p.CACert, "--kubelet-preferred-address-types=InternalIP",
	})
	if err != nil {
		return err
	}
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	return proc.waitFor(90*time.Second, "/readyz", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// serviceRoute sends the service CIDR to the API bridge: service traffic
// no kube-proxy rule catches dies there instead of leaving the machine.
func (c *Cluster) serviceRoute(t crienv.T) error {
	if err := run("ip", "route", "add", ServiceCIDR, "dev", c.apiBridge); err != nil {
		return err
	}
	t.Cleanup(func() { _ = run("ip", "route", "del", ServiceCIDR, "dev", c.apiBridge) })
	return nil
}

func (c *Cluster) controllers(t crienv.T) error {
	p := c.PKI
	auth := func(kc string) []string {
		return []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=" + c.apiIP, "--leader-elect=false"}
	}
	kcm := append(auth(p.ControllerManager), "--secure-port=10257", "--root-ca-file="+p.CACert,
		"--service-account-private-key-file="+p.SAKey, "--use-service-account-credentials=true",
		"--cluster-signing-cert-file="+p.CACert, "--cluster-signing-key-file="+p.CAKey,
		"--service-cluster-ip-range="+ServiceCIDR, "--allocate-node-cidrs=false",
		"--node-monitor-grace-period="+NodeMonitorGracePeriod.String(),
		"--flex-volume-plugin-dir="+filepath.Join(c.Dir, "kcm", "volume-plugins"))
	if c.Fleet {
		kcm = append(kcm, "--controllers=*,-node-lifecycle-controller")
	}
	if _, err := c.start(t, "kube-controller-manager", filepath.Join(c.k8sBin, "kube-controller-manager"), kcm); err != nil {
		return err
	}
	_, err := c.start(t, "kube-scheduler", filepath.Join(c.k8sBin, "kube-scheduler"), append(auth(p.Scheduler), "--secure-port=10259"))
	return err
}

// Clientset is a client-go clientset with the admin kubeconfig.
func (c *Cluster) Clientset() (*kubernetes.Clientset, error) {
	if c.clientset != nil {
		return c.clientset, nil
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.clientset = cs
	return cs, nil
}

// RESTConfig is the admin's client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// EtcdMetricsURL is etcd's metrics endpoint (plain HTTP on the API bridge).
func (c *Cluster) EtcdMetricsURL() string { return "http://" + c.apiIP + ":2381/metrics" }

// Kubectl runs kubectl against the cluster.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// RepoRoot is the checkout this package is in.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func shortHash(s string) string {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return fmt.Sprintf("%08x", h)[:6]
}
