package crienv

// The package's entry point: its constants, Options, Env, Start, and the
// containerd config.toml Start writes. test/chart's TestDropIn reads
// configTemplate's sandlot runtime block from this file.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"text/template"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// ContainerdVersion is the containerd the harness runs, from the cache
	// hack/containerd-bins.sh fills.
	ContainerdVersion = "v2.4.2"
	// DefaultSubnet is the CNI bridge subnet when Options.Subnet is empty.
	// Two Envs alive at the same time need different subnets.
	DefaultSubnet = "10.89.0.0/24"
	// DefaultPauseImage is the locally built sandbox image every Env pins.
	DefaultPauseImage = "sandlot.test/pause:1"
	// Namespace is the containerd namespace the CRI plugin uses.
	Namespace = "k8s.io"

	runcPath    = "/usr/sbin/runc"
	cniBinDir   = "/usr/lib/cni"
	busyboxPath = "/bin/busybox"
	// cniCacheDir is libcni's result cache; go-cni gives containerd no
	// knob for it, so it is the one path outside Dir that pods touch.
	cniCacheDir   = "/var/lib/cni"
	ipForwardPath = "/proc/sys/net/ipv4/ip_forward"
	// namePrefix starts the bridge, CNI network and cgroup parent names;
	// Stop uses it to see whether other Envs are alive on the host.
	namePrefix = "crienv"

	readyTimeout = 30 * time.Second
	rpcTimeout   = 30 * time.Second
	execTimeout  = 10 * time.Second
	pollInterval = 20 * time.Millisecond
	// maxSocketPath is sun_path's size minus the trailing NUL.
	maxSocketPath = 107
)

// Options configures Start.
type Options struct {
	// Dir holds all state (root, state, sockets, CNI config, IPAM, netns,
	// logs). "" makes a fresh directory under /tmp that Stop removes. Keep
	// it short: containerd's sockets live here (see shimSocketDir).
	Dir string
	// ShimDir is prepended to containerd's PATH; it holds
	// containerd-shim-sandlot-v2. May be "".
	ShimDir string
	// SandlotConfig is the sandlot shim's config file. When set, the
	// runtime handler "sandlot" is registered with it as ConfigPath.
	SandlotConfig string
	// ShimInstalledLater: the shim (in ShimDir) and SandlotConfig are put
	// there after containerd starts (a node agent's installer does), so
	// their absence at the start is no error.
	ShimInstalledLater bool
	// Subnet is the CNI bridge subnet, DefaultSubnet when "".
	Subnet string
	// Bridge creates the CNI bridge with its gateway address up front
	// (the CNI plugin adopts it): a kubelet binds the node IP there.
	Bridge bool
	// PlainHTTPRegistries are registries (host:port) CRI pulls from over
	// HTTP (a local cluster's own registry), each by a hosts.toml in the
	// registry config_path, as a node's operator configures a mirror.
	PlainHTTPRegistries []string
}

// Env is a running containerd with CRI.
type Env struct {
	Dir     string
	Address string // containerd's gRPC unix socket
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient

	Bridge       string // CNI bridge, unique per Dir
	Network      string // CNI network name
	Subnet       *net.IPNet
	Gateway      net.IP // the bridge's address, reachable from pods
	PauseImage   string
	CgroupParent string // pods' cgroup parent (cgroupfs driver)
	ConfigPath   string // containerd's config.toml
	LogPath      string // containerd's log, kept across Restart

	t         T
	opts      Options
	bins      binaries
	socketDir string // shim sockets; Dir/s unless that is too long
	ownDirs   []string
	host      hostState
	conn      *grpc.ClientConn

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce sync.Once
}

// binaries are the host programs the harness runs.
type binaries struct {
	containerd, ctr, shimDir, ip string
}

// hostState is what the host looked like before Start, so Stop can put
// back what containerd and the CNI plugins changed.
type hostState struct {
	ipForward      string
	cniCacheExists bool
}

// Start writes the config, starts containerd, waits until CRI reports
// RuntimeReady and NetworkReady, and imports the pause image. A t.Cleanup
// calls Stop.
func Start(t T, o Options) *Env {
	t.Helper()
	e := &Env{t: t, opts: o, bins: findBinaries(t), PauseImage: DefaultPauseImage}
	e.checkSandlot(t)
	e.setupDirs(t)
	// Registered before anything else, so a failed start is cleaned too.
	t.Cleanup(e.Stop)
	e.setupNames(t)
	e.host = snapshotHost(e.Bridge)
	if e.opts.Bridge {
		ones, _ := e.Subnet.Mask.Size()
		if err := MakeBridge(e.Bridge, fmt.Sprintf("%s/%d", e.Gateway, ones)); err != nil {
			t.Fatalf("crienv: %v", err)
		}
	}
	if err := e.writeConfigs(); err != nil {
		t.Fatalf("crienv: %v", err)
	}
	if err := e.dial(); err != nil {
		t.Fatalf("crienv: %v", err)
	}
	begin := time.Now()
	e.startContainerd(t)
	e.waitReady(t)
	t.Logf("crienv: containerd %s ready in %v (%s)", ContainerdVersion, time.Since(begin).Round(time.Millisecond), e.Dir)
	e.ImportImage(t, e.PauseImage, Image{Entrypoint: []string{"/bin/sleep", "2147483647"}})
	return e
}

// configTemplate is containerd's config, version 3 (2.4 migrates it in
// memory and logs a warning). Every path is under Dir: without socket_dir,
// runc's Root, netns_mounts_under_state_dir and NRI disabled, containerd
// would use /run/containerd/{s,runc}, /run/netns and /run/nri.
var configTemplate = template.Must(template.New("config").Parse(`version = 3
root = '{{.Dir}}/root'
state = '{{.Dir}}/state'
imports = []

[grpc]
  address = '{{.Address}}'

[ttrpc]
  address = '{{.Address}}.ttrpc'

[debug]
  level = 'info'

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '{{.Dir}}/opt'

  [plugins.'io.containerd.nri.v1.nri']
    disable = true

  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = '{{.SocketDir}}'

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{{.Dir}}/certs.d'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{{.PauseImage}}'

  [plugins.'io.containerd.cri.v1.runtime']
    # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj (pause: -998).
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_apparmor = {{.DisableApparmor}}
    cdi_spec_dirs = ['{{.Dir}}/cdi']
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{{.Runc}}'
          Root = '{{.Dir}}/runc'
          SystemdCgroup = false
{{- if .SandlotConfig}}
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.sandlot]
        runtime_type = 'io.containerd.sandlot.v2'
        sandboxer = 'podsandbox'
        pod_annotations = ['sandlot.dev/*']
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.sandlot.options]
          ConfigPath = '{{.SandlotConfig}}'
{{- end}}
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{{.CNIBinDir}}']
      conf_dir = '{{.Dir}}/cni/net.d'
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`))

func (e *Env) writeConfigs() error {
	for _, d := range []string{"cni/net.d", "cni/ipam", "cdi", "tmp", "pods", "images"} {
		if err := os.MkdirAll(filepath.Join(e.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := e.writeCNIConfig(); err != nil {
		return err
	}
	if err := e.writeRegistryHosts(); err != nil {
		return err
	}
	var buf bytes.Buffer
	err := configTemplate.Execute(&buf, map[string]any{
		"Dir": e.Dir, "Address": e.Address, "SocketDir": e.socketDir, "PauseImage": e.PauseImage,
		"Runc": runcPath, "CNIBinDir": cniBinDir, "SandlotConfig": e.opts.SandlotConfig,
		"DisableApparmor": !apparmorEnabled(),
	})
	if err != nil {
		return fmt.Errorf("render containerd config: %w", err)
	}
	return os.WriteFile(e.ConfigPath, buf.Bytes(), 0o644)
}

// apparmorEnabled mirrors what runc checks; on hosts without AppArmor
// the CRI plugin must not ask for a profile.
func apparmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.HasPrefix(string(b), "Y")
}

// writeRegistryHosts writes certs.d/<host>/hosts.toml for each plain-HTTP
// registry: containerd's hosts format, pull and resolve only.
func (e *Env) writeRegistryHosts() error {
	for _, host := range e.opts.PlainHTTPRegistries {
		dir := filepath.Join(e.Dir, "certs.d", host)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		toml := fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", host)
		if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644); err != nil {
			return fmt.Errorf("registry %s: %w", host, err)
		}
	}
	return nil
}
