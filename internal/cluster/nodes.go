package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/vmassets"
)

// proxy runs one kube-proxy for the host (the nodes share its network
// namespace, so one set of iptables rules serves them all).
func (c *Cluster) proxy(t crienv.T) error {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
clusterCIDR: %s.0.0/16
bindAddress: %s
healthzBindAddress: %s:10256
metricsBindAddress: %s:10249
nodePortAddresses: [%s/32]
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, masqueradeAll: false, syncPeriod: 30s, minSyncPeriod: 1s}
`, c.PKI.Proxy, NodeName(1), c.Prefix, c.apiIP, c.apiIP, c.apiIP, c.apiIP)
	path := filepath.Join(c.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	bin := filepath.Join(c.k8sBin, "kube-proxy")
	p, err := c.start(t, "kube-proxy", bin, []string{"--config=" + path, "--v=1"})
	if err != nil {
		return err
	}
	// After it stops: its chains go (the baseline restore catches the rest).
	t.Cleanup(func() { _ = run(bin, "--cleanup", "--config="+path) })
	return p.waitFor(30*time.Second, "healthz", func() error { return httpOK("http://" + c.apiIP + ":10256/healthz") })
}

// nodes starts each node's containerd and kubelet and waits until all are
// Ready, then for the default ServiceAccount (pods need it).
func (c *Cluster) nodes(t crienv.T) error {
	assets, err := vmassets.Load()
	if err != nil {
		return err
	}
	c.guestModules = assets.Assets.Modules
	for i := 1; i <= c.Options.Nodes; i++ {
		n, err := c.startNode(t, i, assets)
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		err := n.kubelet.waitFor(90*time.Second, "node Ready", func() error { return c.nodeReady(n.Name) })
		if err != nil && startFlake(n.kubelet) {
			err = c.RestartKubelet(n.Name)
		}
		if err != nil {
			return err
		}
		if err := c.untaintReady(n.Name); err != nil {
			return err
		}
	}
	return c.waitServiceAccount()
}

// untaintReady removes the not-ready taint from a Ready node where no
// node lifecycle controller does (Fleet).
func (c *Cluster) untaintReady(name string) error {
	if !c.Fleet {
		return nil
	}
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// kube-controller-manager writes new Nodes too (its TTL annotation).
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		_, err = cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("untaint node %s: %w", name, err)
	}
	return nil
}

// startFlake: the kubelet ended at start-up because renaming a socket
// it created within one directory failed with EXDEV ("Failed to create
// listener for pods API endpoint … invalid cross-device link"; seen once
// in make test; the same flake as k3s-io/k3s#4042, never explained
// upstream). It is started once more; any other exit fails the start.
func startFlake(kubelet *proc) bool {
	return kubelet.exited() && isStartFlake(kubelet.tail())
}

func isStartFlake(log string) bool {
	return strings.Contains(log, "Failed to create listener for") && strings.Contains(log, "invalid cross-device link")
}

func (c *Cluster) startNode(t crienv.T, i int, assets vmassets.Env) (*Node, error) {
	n := &Node{Name: NodeName(i), IP: c.nodeIP(i), dir: filepath.Join(c.Dir, c.nodeDirName(i))}
	if err := os.RemoveAll(filepath.Join(n.dir, "kubelet")); err != nil { // a fresh node each start
		return nil, err
	}
	n.SandlotRoot = filepath.Join(n.dir, "sandlot")
	if err := c.shimPlaces(t, n); err != nil {
		return nil, err
	}
	// The chart's installer (the agent pod's init container) puts the shim
	// and its config there, as on any node; containerd looks for them at
	// the first sandlot pod.
	n.CRI = crienv.Start(t, crienv.Options{Dir: filepath.Join(n.dir, "c"), ShimDir: filepath.Join(n.dir, "bin"),
		SandlotConfig: filepath.Join(n.dir, shimConfigName), ShimInstalledLater: true,
		Subnet: fmt.Sprintf("%s.%d.0/24", c.Prefix, i), Bridge: true, PlainHTTPRegistries: []string{c.RegistryHost()}})
	if assets.Image != "" {
		n.CRI.ImportArchive(t, assets.Image, assets.ImageRef)
	}
	if c.Options.Interpreter {
		if assets.InterpreterImage == "" {
			return nil, errors.New("current.env names no code-interpreter image: run `make vm-assets`")
		}
		n.CRI.ImportArchive(t, assets.InterpreterImage, assets.InterpreterImageRef)
	}
	kc, err := c.kubeletConfig(n)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.unmountKubelet(t, n) })
	if err := crienv.MakeCgroup("/" + n.cgroupRoot(c)); err != nil {
		return nil, err
	}
	pki := c.PKI.Kubelets[n.Name]
	n.kubelet, err = c.start(t, "kubelet-"+n.Name, filepath.Join(c.k8sBin, "kubelet"), []string{
		"--config=" + kc, "--kubeconfig=" + pki.Kubeconfig, "--root-dir=" + filepath.Join(n.dir, "kubelet", "root"),
		"--cert-dir=" + filepath.Join(n.dir, "kubelet", "pki"), "--hostname-override=" + n.Name, "--node-ip=" + n.IP,
		"--node-labels=" + c.nodeLabels(), "--v=1",
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// nodeLabels are the kubelets' node labels: a sandbox node with its agent,
// or (Fleet) a node for the control plane only.
func (c *Cluster) nodeLabels() string {
	if c.Fleet {
		return "test.sandlot.dev/control-plane=true"
	}
	return sandlotv1.LabelRuntime + "=true," + AgentLabel + "=run"
}

// shimConfigName is the shim's config file in a node's directory (the
// chart's node.shimConfigPath; the runtime's ConfigPath).
const shimConfigName = "sandlot-shim.json"

// shimPlaces makes the directories the chart's installer writes into on
// n, and n's guest RAM directory (tmpfs, the chart's node.memoryDir).
func (c *Cluster) shimPlaces(t crienv.T, n *Node) error {
	mem := c.memoryDir(n.Name)
	if err := os.MkdirAll(mem, 0o700); err != nil {
		return err
	}
	t.Cleanup(func() { os.RemoveAll(mem) })
	return os.MkdirAll(filepath.Join(n.dir, "bin"), 0o755)
}

// memoryDir is a node's guest RAM directory on the host's tmpfs.
func (c *Cluster) memoryDir(node string) string {
	return fmt.Sprintf("/dev/shm/sandlot-%s-%s", shortHash(c.Dir), node)
}

// kubeletConfig writes the node's KubeletConfiguration: its own address,
// ports, cgroup root and directories (two kubelets share this host).
func (c *Cluster) kubeletConfig(n *Node) (string, error) {
	pki := c.PKI.Kubelets[n.Name]
	resolv, err := c.resolvConf(n)
	if err != nil {
		return "", err
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: %[1]s
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[2]s}
authorization: {mode: Webhook}
tlsCertFile: %[3]s
tlsPrivateKeyFile: %[4]s
containerRuntimeEndpoint: unix://%[5]s
cgroupDriver: cgroupfs
cgroupRoot: /%[6]s
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
%[10]sresolvConf: %[9]s
podLogsDir: %[7]s
staticPodPath: ""
registerNode: true
evictionHard: {memory.available: "100Mi", nodefs.available: "2%%", imagefs.available: "2%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
volumePluginDir: %[8]s
oomScoreAdj: 0
nodeStatusUpdateFrequency: 5s
`, n.IP, c.PKI.CACert, pki.ServingCert, pki.ServingKey, n.CRI.Address, n.cgroupRoot(c),
		filepath.Join(n.dir, "kubelet", "pod-logs"), filepath.Join(n.dir, "kubelet", "volume-plugins"), resolv, c.clusterDNSConfig())
	path := filepath.Join(n.dir, "kubelet.yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

// clusterDNSConfig is the kubelet's clusterDNS line when the cluster runs
// its DNS ("" otherwise: pods use resolvConf's nameservers).
func (c *Cluster) clusterDNSConfig() string {
	if !c.ClusterDNS {
		return ""
	}
	return "clusterDNS: [" + DNSServiceIP + "]\n"
}

// resolvConf is the resolv.conf the kubelet gives pods of dnsPolicy
// Default (all of them without ClusterDNS): the host's, or one naming
// Options.DNS.
func (c *Cluster) resolvConf(n *Node) (string, error) {
	if len(c.DNS) == 0 {
		return "/etc/resolv.conf", nil
	}
	var b strings.Builder
	for _, ns := range c.DNS {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	path := filepath.Join(n.dir, "resolv.conf")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// cgroupRoot is the node's cgroup subtree (its pods' kubepods inside).
func (n *Node) cgroupRoot(c *Cluster) string { return "sandlot-" + shortHash(c.Dir) + "-" + n.Name }

// unmountKubelet undoes the kubelet's mounts (its root dir bind-mounts
// itself; projected volumes are tmpfs) and its cgroups.
func (c *Cluster) unmountKubelet(t crienv.T, n *Node) {
	root := filepath.Join(n.dir, "kubelet")
	if err := crienv.UnmountUnder(root); err != nil {
		t.Errorf("cluster: %v", err)
	}
	if err := crienv.RemoveCgroup("/" + n.cgroupRoot(c)); err != nil {
		t.Errorf("cluster: %v", err)
	}
}

func (c *Cluster) nodeReady(name string) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s not Ready", name)
}

func (c *Cluster) waitServiceAccount() error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	return c.procs["kube-controller-manager"].waitFor(60*time.Second, "ServiceAccount default/default", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// KillKubelet stops a node's kubelet at once (its pods keep running), as
// a node failure would.
func (c *Cluster) KillKubelet(node string) error {
	n, err := c.node(node)
	if err != nil {
		return err
	}
	n.kubelet.kill()
	return nil
}

// RestartKubelet starts a node's kubelet again and waits for the node to
// be Ready. It lives as long as the cluster, not the caller's test.
func (c *Cluster) RestartKubelet(node string) error {
	n, err := c.node(node)
	if err != nil {
		return err
	}
	old := n.kubelet
	n.kubelet, err = c.start(c.t, old.name, old.cmd.Path, old.cmd.Args[1:])
	if err != nil {
		return err
	}
	return n.kubelet.waitFor(90*time.Second, "node Ready", func() error { return c.nodeReady(n.Name) })
}

// StoreDir is the node agent's store (its cache, for s3).
func (n *Node) StoreDir() string { return filepath.Join(n.dir, "store") }

func (c *Cluster) node(name string) (*Node, error) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node %s", name)
}

// VersionLDFlags stamp the chart's appVersion into a binary, as make
// build does.
func VersionLDFlags() (string, error) {
	ch, err := LoadChart()
	if err != nil {
		return "", err
	}
	return "-X github.com/sandlot-dev/sandlot/internal/version.Version=" + ch.AppVersion(), nil
}

// Build compiles the sandlot binaries a cluster runs into dir, stamped
// as make build stamps them.
func Build(dir string) error {
	ldflags, err := VersionLDFlags()
	if err != nil {
		return err
	}
	for _, cmd := range []string{"sandlot-controller", "sandlot-agent", "sandlot-api", "containerd-shim-sandlot-v2"} {
		b := exec.Command("go", "build", "-ldflags", ldflags, "-o", filepath.Join(dir, cmd), "./cmd/"+cmd)
		b.Dir = RepoRoot()
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w: %s", cmd, err, out)
		}
	}
	return nil
}

func httpOK(url string) error {
	client := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
