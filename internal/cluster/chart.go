package cluster

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/internal/vmassets"
)

// The Helm release every cluster installs.
const (
	ReleaseName      = "sandlot"
	ReleaseNamespace = "sandlot-system"
)

// ImageNames are the images `make image` writes as <BinDir>/images/<name>.tar.
var ImageNames = []string{"sandlot-controller", "sandlot-api", "sandlot-agent"}

// imageRepository is the images' repository prefix under a registry
// (the chart's defaults).
const imageRepository = "sandlot/"

// installChart pushes the images to the cluster's registry and installs
// charts/sandlot with the local cluster's values (image.registry names
// that registry: the kubelets pull), waiting until every component is
// ready.
func (c *Cluster) installChart(crienv.T) error {
	ch, err := c.installedChart()
	if err != nil {
		return err
	}
	if err := c.preinstall(); err != nil {
		return err
	}
	cfg, err := HelmConfig(c.Kubeconfig)
	if err != nil {
		return err
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = ReleaseName, ReleaseNamespace, true
	install.Wait, install.Timeout = true, 3*time.Minute
	if _, err := install.Run(ch, c.ChartValues()); err != nil {
		return fmt.Errorf("helm install %s: %w", ReleaseName, err)
	}
	return nil
}

// installedChart is the chart the cluster installs, its images pushed:
// this checkout's, or Options.Release's.
func (c *Cluster) installedChart() (*chart.Chart, error) {
	if c.Release == "" {
		ch, err := LoadChart()
		if err != nil {
			return nil, err
		}
		return ch, c.pushImages(ch.AppVersion())
	}
	tgz, err := filepath.Glob(filepath.Join(c.Release, "sandlot-*.tgz"))
	if err != nil || len(tgz) != 1 {
		return nil, fmt.Errorf("release %s: want one sandlot-<version>.tgz, found %v (%v)", c.Release, tgz, err)
	}
	ch, err := loader.Load(tgz[0])
	if err != nil {
		return nil, fmt.Errorf("release %s: %w", c.Release, err)
	}
	v := ch.AppVersion()
	return ch, c.pushArchives(v, func(name string) string { return filepath.Join(c.Release, name+"-"+v+".oci.tar") })
}

// UpgradeToCheckout upgrades a cluster installed from Options.Release to
// this checkout, as an operator moves to a new release: its images
// pushed, helm upgrade with its chart and the cluster's values.
func (c *Cluster) UpgradeToCheckout() error {
	ch, err := LoadChart()
	if err != nil {
		return err
	}
	if err := c.pushImages(ch.AppVersion()); err != nil {
		return err
	}
	c.Release = ""
	return c.Upgrade(nil)
}

// Upgrade runs helm upgrade of the release with values laid over the
// cluster's (Options.Values stay unless values override them) and waits
// until every component runs the new settings (the agent DaemonSet rolls
// one node at a time). Upgrade(nil) goes back to the install's values.
func (c *Cluster) Upgrade(values map[string]any) error {
	ch, err := LoadChart()
	if err != nil {
		return err
	}
	cfg, err := HelmConfig(c.Kubeconfig)
	if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = ReleaseNamespace, true, 5*time.Minute
	if _, err := up.Run(ReleaseName, ch, chartutil.CoalesceTables(deepCopy(values), c.ChartValues())); err != nil {
		return fmt.Errorf("helm upgrade %s: %w", ReleaseName, err)
	}
	return nil
}

// HelmConfig is a Helm action configuration for a cluster's release
// namespace, as kubeconfig's user.
func HelmConfig(kubeconfig string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	kc, ns := kubeconfig, ReleaseNamespace
	flags.KubeConfig, flags.Namespace = &kc, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", func(format string, v ...any) {}); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// LoadChart loads charts/sandlot from this checkout.
func LoadChart() (*chart.Chart, error) {
	ch, err := loader.Load(filepath.Join(RepoRoot(), "charts", "sandlot"))
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	return ch, nil
}

// ChartValues are the local cluster's chart values — images pulled from
// the cluster's registry, node paths under each node's directory ($(NODE_NAME))
// where the chart's installer puts the shim and its config (the runtime
// registered by the harness), agents on nodes labelled AgentLabel, the
// local cluster's CPU overcommit, the store (local or s3) — with
// Options.Values over them.
func (c *Cluster) ChartValues() map[string]any {
	v := c.localValues()
	if c.APIDomain != "" {
		api := v["api"].(map[string]any)
		api["domain"] = c.APIDomain
		api["tls"] = map[string]any{"secretName": apiTLSSecret}
	}
	return chartutil.CoalesceTables(deepCopy(c.Values), v)
}

// deepCopy copies nested value maps (CoalesceTables writes into its first
// argument).
func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		out[k] = v
	}
	return out
}

func (c *Cluster) localValues() map[string]any {
	image := map[string]any{"pullPolicy": "IfNotPresent"}
	nodeDir := filepath.Join(c.Dir, "$(NODE_NAME)")
	v := map[string]any{
		"image":      map[string]any{"registry": c.RegistryHost()},
		"controller": map[string]any{"image": image, "cpuPerVCPU": "10m"},
		"api":        map[string]any{"image": image, "defaultTemplate": "python"},
		// The installer puts the shim, guest assets and shim config into the
		// node's directory; the harness's containerd already names them
		// (no runtime registration, no containerd restart).
		"agent": map[string]any{"image": image, "registerRuntime": false,
			"install":      map[string]any{"enabled": true},
			"nodeSelector": map[string]any{"sandlot.dev/runtime": "true", AgentLabel: "run"}},
		"node": map[string]any{"dataDir": nodeDir, "runDir": filepath.Join(nodeDir, "sandlot"),
			"storeDir":       filepath.Join(nodeDir, "store"),
			"shimPath":       filepath.Join(nodeDir, "bin", "containerd-shim-sandlot-v2"),
			"shimConfigPath": filepath.Join(nodeDir, shimConfigName),
			"memoryDir":      c.memoryDir("$(NODE_NAME)")},
		"storage": map[string]any{"mode": "local"},
	}
	// The initramfs `make vm-assets` built loads these; a previous
	// release's chart names its own image's (0.1.0's lacks the NFS
	// modules this checkout's guest loads).
	if c.guestModules != "" && c.Release == "" {
		v["agent"].(map[string]any)["install"].(map[string]any)["guestModules"] = c.guestModules
	}
	if len(c.Teams) > 0 {
		teams := make([]any, len(c.Teams)) // the chart's schema takes JSON arrays, not []string
		for i, t := range c.Teams {
			teams[i] = t
		}
		v["api"].(map[string]any)["teams"] = teams
	}
	if s := c.S3; s != nil {
		v["storage"] = map[string]any{"mode": "s3", "s3": map[string]any{"endpoint": s.Endpoint, "bucket": s.Bucket,
			"region": s.Region, "insecure": true, "accessKeyID": s.AccessKey, "secretAccessKey": s.SecretKey}}
	}
	if c.JuiceFSCSI {
		// The static PV juicefs.go makes binds the chart's PVC; node paths
		// are each node's own (two kubelets on one host).
		v["storage"] = map[string]any{"mode": "juicefs", "juicefs": map[string]any{
			"storageClassName": juicefsStorageClass,
			"kubeletDir":       filepath.Join(nodeDir, "kubelet", "root"),
			"stagingDir":       filepath.Join(nodeDir, "jfscache", c.JuiceFSVolume.UUID, "rawstaging")}}
	}
	return v
}

// minio starts the store's MinIO on the API bridge when asked.
func (c *Cluster) minio(t crienv.T) error {
	if !c.MinIO {
		return nil
	}
	srv := minio.StartOn(t, filepath.Join(c.Dir, "minio"), c.apiIP)
	c.MinIOServer = srv
	c.S3 = &S3Store{Endpoint: srv.Endpoint, Bucket: srv.Bucket, AccessKey: minio.AccessKey, SecretKey: minio.SecretKey,
		Region: minio.Region}
	return nil
}

// nodeDirName is a node's directory under Dir: its name (the agent
// DaemonSet finds it by $(NODE_NAME)).
func (c *Cluster) nodeDirName(i int) string { return NodeName(i) }

// RestartContainerd kills a node's containerd and starts it again (its
// shims and VMs keep running), as a node's runtime upgrade would. It
// lives as long as the cluster.
func (c *Cluster) RestartContainerd(node string) (err error) {
	n, err := c.node(node)
	if err != nil {
		return err
	}
	defer func() {
		switch r := recover().(type) {
		case nil:
		case fatal:
			err = r
		default:
			panic(r)
		}
	}()
	n.CRI.Restart(panicT{logf: c.logf})
	return nil
}

// panicT is a crienv.T outside any test: a fatal failure panics with a
// fatal, which RestartContainerd recovers into its error.
type panicT struct{ logf func(string, ...any) }

type fatal struct{ error }

func (panicT) Helper()                             {}
func (panicT) Cleanup(func())                      {}
func (panicT) Failed() bool                        { return false }
func (panicT) Name() string                        { return "cluster" }
func (p panicT) Logf(format string, args ...any)   { p.logf(format, args...) }
func (p panicT) Errorf(format string, args ...any) { p.logf(format, args...) }
func (panicT) Fatal(args ...any)                   { panic(fatal{fmt.Errorf("%s", fmt.Sprint(args...))}) }
func (panicT) Fatalf(format string, args ...any)   { panic(fatal{fmt.Errorf(format, args...)}) }

// BuildImages writes the chart's images (`make image`) from the binaries
// in binDir (Build) into binDir/images, for a cluster in a test.
func BuildImages(binDir string) error {
	ch, err := LoadChart()
	if err != nil {
		return err
	}
	assets, err := vmassets.Load()
	if err != nil {
		return err
	}
	qemu, err := QEMUBundle()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "run", "./hack/images", "-bin", binDir, "-kernel", assets.Assets.Kernel,
		"-initrd", assets.Assets.Initrd, "-qemu", qemu, "-tag", ch.AppVersion(), "-o", filepath.Join(binDir, "images"))
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("images: %w: %s", err, out)
	}
	return nil
}

// QEMUBundle is the QEMU the agent image ships (hack/qemu-bundle.sh, which
// makes it in seconds the first time): its directory.
func QEMUBundle() (string, error) {
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "qemu-bundle.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/qemu-bundle.sh: %w: %s", err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
