// Package crienv starts an isolated, real containerd (v2.4.2, the one
// hack/containerd-bins.sh builds) with its CRI plugin, and gives tests a CRI
// client plus helpers to import images built in Go, run pods and containers
// and exec into them. Every piece of state lives under one directory, nothing
// is written under /run, and the cleanup undoes what the host saw (bridge,
// netns and overlay mounts, cgroups, the CNI result cache, ip_forward).
//
// The host needs root, runc (/usr/sbin/runc), the CNI plugins in /usr/lib/cni,
// busybox-static (/bin/busybox) and iproute2.
package crienv

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/test/oci"
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
	// Subnet is the CNI bridge subnet, DefaultSubnet when "".
	Subnet string
	// Bridge creates the CNI bridge with its gateway address up front
	// (the CNI plugin adopts it): a kubelet binds the node IP there.
	Bridge bool
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

// findBinaries fails the test with the command that installs what is missing.
func findBinaries(t T) binaries {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("crienv: needs root (containerd, runc, CNI, mounts)")
	}
	cache := os.Getenv("SANDLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
	}
	dir := filepath.Join(cache, "containerd", ContainerdVersion)
	for _, name := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if !isExecutable(filepath.Join(dir, name)) {
			t.Fatalf("crienv: %s not found in $SANDLOT_CACHE/containerd/%s (%s): run `make containerd-bins`", name, ContainerdVersion, dir)
		}
	}
	if !isExecutable(runcPath) {
		t.Fatalf("crienv: runc not found at %s: apt-get install runc", runcPath)
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if !isExecutable(filepath.Join(cniBinDir, p)) {
			t.Fatalf("crienv: CNI plugin %s not found in %s: apt-get install containernetworking-plugins", p, cniBinDir)
		}
	}
	if err := checkStatic(busyboxPath); err != nil {
		t.Fatalf("crienv: %v: apt-get install busybox-static", err)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Fatalf("crienv: ip not found: apt-get install iproute2")
	}
	return binaries{containerd: filepath.Join(dir, "containerd"), ctr: filepath.Join(dir, "ctr"), shimDir: dir, ip: ip}
}

// checkSandlot makes ShimDir and SandlotConfig absolute (containerd runs
// in Dir) and checks that the sandlot handler can work: its config exists
// and containerd will find the shim on its PATH.
func (e *Env) checkSandlot(t T) {
	t.Helper()
	for _, p := range []*string{&e.opts.ShimDir, &e.opts.SandlotConfig} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil || strings.ContainsAny(abs, "'\n:") {
			t.Fatalf("crienv: path %q: %v, or it has a quote, newline or colon (it goes into TOML and PATH)", *p, err)
		}
		*p = abs
	}
	if e.opts.SandlotConfig == "" {
		return
	}
	if _, err := os.Stat(e.opts.SandlotConfig); err != nil {
		t.Fatalf("crienv: SandlotConfig: %v", err)
	}
	for _, dir := range e.pathDirs() {
		if isExecutable(filepath.Join(dir, "containerd-shim-sandlot-v2")) {
			return
		}
	}
	t.Fatalf("crienv: containerd-shim-sandlot-v2 not found on containerd's PATH %v: go build -o <ShimDir>/ ./cmd/containerd-shim-sandlot-v2",
		e.pathDirs())
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// checkStatic makes sure busybox runs in an image that has no libc.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("busybox: %w", err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", p)
		}
	}
	return nil
}

// setupDirs makes Dir and picks the shim socket directory.
func (e *Env) setupDirs(t T) {
	t.Helper()
	dir := e.opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("/tmp", "crienv-")
		if err != nil {
			t.Fatalf("crienv: %v", err)
		}
		dir = d
		e.ownDirs = append(e.ownDirs, d)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatalf("crienv: %v", err)
	}
	if strings.ContainsAny(dir, "'\n") {
		t.Fatalf("crienv: Dir %q must not contain a quote or newline (it goes into TOML literal strings)", dir)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatalf("crienv: %v", err)
	}
	e.Dir = dir
	e.Address = filepath.Join(dir, "containerd.sock")
	e.ConfigPath = filepath.Join(dir, "config.toml")
	e.LogPath = filepath.Join(dir, "containerd.log")
	if len(e.Address)+len(".ttrpc") > maxSocketPath {
		t.Fatalf("crienv: Dir %q is too long for containerd's sockets (max %d bytes)", dir, maxSocketPath-len("/containerd.sock.ttrpc"))
	}
	e.socketDir = e.shimSocketDir(t)
	if err := os.MkdirAll(e.socketDir, 0o711); err != nil {
		t.Fatalf("crienv: %v", err)
	}
}

// shimSocketDir is Dir/s unless a shim socket there (a 64-hex-digit name)
// would not fit in sun_path, which happens with t.TempDir() for long test
// names; then it is a short directory under /tmp that Stop removes.
func (e *Env) shimSocketDir(t T) string {
	t.Helper()
	s := filepath.Join(e.Dir, "s")
	if len(s)+1+64 <= maxSocketPath {
		return s
	}
	d, err := os.MkdirTemp("/tmp", "crienv-s")
	if err != nil {
		t.Fatalf("crienv: %v", err)
	}
	e.ownDirs = append(e.ownDirs, d)
	return d
}

// setupNames derives bridge, network and cgroup names from Dir, so two Envs
// never share them, and checks that the subnet is free.
// envID names an Env's host objects after its directory.
func envID(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:4])
}

// BridgeName is the CNI bridge of the Env in dir (14 bytes; IFNAMSIZ
// allows 15).
func BridgeName(dir string) string { return namePrefix + envID(dir) }

// CgroupParentFor is the cgroup parent of the pods of the Env in dir.
func CgroupParentFor(dir string) string { return "/" + namePrefix + "-" + envID(dir) }

func (e *Env) setupNames(t T) {
	t.Helper()
	e.Bridge = BridgeName(e.Dir)
	e.Network = namePrefix + "-" + envID(e.Dir)
	e.CgroupParent = CgroupParentFor(e.Dir)
	subnet := e.opts.Subnet
	if subnet == "" {
		subnet = DefaultSubnet
	}
	_, n, err := net.ParseCIDR(subnet)
	if err != nil || n.IP.To4() == nil {
		t.Fatalf("crienv: Subnet %q: want an IPv4 CIDR (%v)", subnet, err)
	}
	e.Subnet = n
	e.Gateway = nextIP(n.IP)
	if owner := subnetOwner(n, e.Bridge); owner != "" {
		t.Fatalf("crienv: subnet %s is already used by interface %s (another Env alive? pass a different Options.Subnet)", n, owner)
	}
}

func nextIP(ip net.IP) net.IP {
	v := append(net.IP(nil), ip.To4()...)
	for i := len(v) - 1; i >= 0; i-- {
		v[i]++
		if v[i] != 0 {
			break
		}
	}
	return v
}

// subnetOwner names an interface other than ours with an address in n.
// Two bridges with the same gateway address would steal each other's routes.
func subnetOwner(n *net.IPNet, ours string) string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifaces {
		addrs, err := ifc.Addrs()
		if err != nil || ifc.Name == ours {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && n.Contains(ipn.IP) {
				return ifc.Name
			}
		}
	}
	return ""
}

// hostIPForward is net.ipv4.ip_forward as the first Start of this process
// found it while no Env's bridge existed: an Env started later, after an
// earlier one's pod turned it on, must still restore the original.
var hostIPForward struct {
	sync.Mutex
	value string
}

func snapshotHost(ourBridge string) hostState {
	_, err := os.Stat(cniCacheDir)
	hostIPForward.Lock()
	defer hostIPForward.Unlock()
	if hostIPForward.value == "" && !otherBridges(ourBridge) {
		fwd, _ := os.ReadFile(ipForwardPath)
		hostIPForward.value = strings.TrimSpace(string(fwd))
	}
	return hostState{ipForward: hostIPForward.value, cniCacheExists: err == nil}
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

// cniConfig is the bridge network: the bridge plugin sets the gateway
// address on the bridge (isGateway) and pins its MAC; host-local keeps its
// leases under Dir.
type cniConfig struct {
	CNIVersion string           `json:"cniVersion"`
	Name       string           `json:"name"`
	Plugins    []map[string]any `json:"plugins"`
}

func (e *Env) writeConfigs() error {
	for _, d := range []string{"cni/net.d", "cni/ipam", "cdi", "tmp", "pods", "images"} {
		if err := os.MkdirAll(filepath.Join(e.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := e.writeCNIConfig(); err != nil {
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

func (e *Env) writeCNIConfig() error {
	conf := cniConfig{CNIVersion: "1.0.0", Name: e.Network, Plugins: []map[string]any{
		{
			"type": "bridge", "bridge": e.Bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": e.Subnet.String(), "gateway": e.Gateway.String()}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(e.Dir, "cni", "ipam"),
			},
		},
		{"type": "loopback"},
	}}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(e.Dir, "cni", "net.d", "10-"+e.Network+".conflist"), b, 0o644)
}

// apparmorEnabled mirrors what runc checks; on hosts without AppArmor
// the CRI plugin must not ask for a profile.
func apparmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.HasPrefix(string(b), "Y")
}

// pathDirs is containerd's PATH: it resolves runtime_type
// io.containerd.X.v2 to containerd-shim-X-v2 there.
func (e *Env) pathDirs() []string {
	dirs := []string{e.bins.shimDir, "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
	if e.opts.ShimDir != "" {
		dirs = append([]string{e.opts.ShimDir}, dirs...)
	}
	return dirs
}

// dial makes the CRI client once; it outlives Restart. The short backoff
// matters there: with gRPC's default (1 s, growing) a restarted containerd
// would be seen seconds late.
func (e *Env) dial() error {
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = pollInterval, 200*time.Millisecond
	conn, err := grpc.NewClient("unix://"+e.Address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return fmt.Errorf("CRI client for %s: %w", e.Address, err)
	}
	e.conn = conn
	e.Runtime = runtimeapi.NewRuntimeServiceClient(conn)
	e.Images = runtimeapi.NewImageServiceClient(conn)
	return nil
}

// containerdEnv is containerd's (and so its shims') environment: our shim
// first, then the v2.4.2 runc shim (Debian's older one would be found in
// /usr/bin otherwise, and fails with 2.4), TMPDIR under Dir for its temp
// mounts, and SANDLOT_* so the sandlot shim sees the test's settings.
func (e *Env) containerdEnv() []string {
	env := []string{"PATH=" + strings.Join(e.pathDirs(), ":"), "TMPDIR=" + filepath.Join(e.Dir, "tmp"), "HOME=" + os.Getenv("HOME")}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SANDLOT_") {
			env = append(env, kv)
		}
	}
	return env
}

// startContainerd runs containerd in its own process group, so a ^C aimed
// at `go test` does not kill it before the cleanup runs, with a parent-death
// signal so a crashed test does not leave it behind. Shims get their own
// process groups from containerd and survive Restart.
func (e *Env) startContainerd(t T) {
	t.Helper()
	logf, err := os.OpenFile(e.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("crienv: %v", err)
	}
	cmd := exec.Command(e.bins.containerd, "--config", e.ConfigPath)
	cmd.Env = e.containerdEnv()
	cmd.Dir = e.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	if err := StartHeld(cmd, func(error) { logf.Close(); close(exited) }); err != nil {
		logf.Close()
		t.Fatalf("crienv: start containerd: %v", err)
	}
	e.mu.Lock()
	e.cmd, e.exited = cmd, exited
	e.mu.Unlock()
}

// waitReady polls Version and Status until the runtime and the network
// (the CNI config loaded) are ready.
func (e *Env) waitReady(t T) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		if last = e.ready(); last == nil {
			return
		}
		select {
		case <-e.exited:
			t.Fatalf("crienv: containerd exited during start: %v (its log follows)", e.cmd.ProcessState)
		case <-time.After(pollInterval):
		}
	}
	t.Fatalf("crienv: CRI not ready after %v: %v (containerd's log follows)", readyTimeout, last)
}

func (e *Env) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := e.Runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	st, err := e.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	// Other conditions (ContainerdHasNoDeprecationWarnings: cgroup v1) are
	// not about readiness.
	seen := 0
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type != runtimeapi.RuntimeReady && c.Type != runtimeapi.NetworkReady {
			continue
		}
		if !c.Status {
			return fmt.Errorf("%s false: %s %s", c.Type, c.Reason, c.Message)
		}
		seen++
	}
	if seen != 2 {
		return fmt.Errorf("status lacks RuntimeReady or NetworkReady: %v", st.GetStatus().GetConditions())
	}
	return nil
}

// logTail is the end of containerd's log, for failure messages.
func (e *Env) logTail(lines int) string {
	b, err := os.ReadFile(e.LogPath)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "containerd log (" + e.LogPath + "):\n" + strings.Join(all, "\n")
}

// Restart SIGKILLs containerd and starts it again with the same config;
// shims and containers keep running.
func (e *Env) Restart(t T) {
	t.Helper()
	e.killContainerd()
	begin := time.Now()
	e.startContainerd(t)
	e.waitReady(t)
	t.Logf("crienv: containerd restarted, ready in %v", time.Since(begin).Round(time.Millisecond))
}

func (e *Env) killContainerd() {
	e.mu.Lock()
	cmd, exited := e.cmd, e.exited
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

func (e *Env) running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.exited == nil {
		return false
	}
	select {
	case <-e.exited:
		return false
	default:
		return true
	}
}

// Stop removes the pods still present, kills containerd, and undoes the
// host side effects: leftover shims and container processes, mounts under
// Dir, the bridge, cgroups, CNI cache entries and ip_forward. Problems are
// reported as test errors. Safe to call more than once.
func (e *Env) Stop() {
	e.stopOnce.Do(func() {
		// A pod CRI cannot remove (a failing shim under test) is not an
		// error here: undoHost kills and unmounts what it left, and
		// reports what it cannot undo.
		if e.running() {
			if err := e.removeAllPods(); err != nil {
				e.t.Logf("crienv: stop: %v (killing what is left)", err)
			}
		}
		e.killContainerd()
		if e.conn != nil {
			_ = e.conn.Close()
		}
		for _, err := range e.undoHost() {
			e.t.Errorf("crienv: stop: %v", err)
		}
		if e.t.Failed() {
			e.t.Logf("%s", e.logTail(30))
		}
		for _, d := range e.ownDirs {
			if err := os.RemoveAll(d); err != nil {
				e.t.Errorf("crienv: stop: %v", err)
			}
		}
	})
}

// undoHost runs every cleanup step even when one fails.
func (e *Env) undoHost() []error {
	var errs []error
	if err := e.killLeftovers(); err != nil {
		errs = append(errs, err)
	}
	for _, dir := range []string{e.Dir, e.socketDir} {
		if err := unmountUnder(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.deleteBridge(); err != nil {
		errs = append(errs, err)
	}
	if err := e.removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	if err := e.cleanCNICache(); err != nil {
		errs = append(errs, err)
	}
	if err := e.restoreIPForward(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func (e *Env) removeAllPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	pods, err := e.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	var errs []error
	for _, p := range pods.Items {
		errs = append(errs, e.removePod(ctx, p.Id))
	}
	return errors.Join(errs...)
}

func (e *Env) removePod(ctx context.Context, id string) error {
	if _, err := e.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("stop pod %s: %w", id, err)
	}
	if _, err := e.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("remove pod %s: %w", id, err)
	}
	return nil
}

// Processes lists the processes that belong to this Env apart from
// containerd itself: shims (their command line names Dir) and container
// processes (in CgroupParent). Zombies are left out.
func (e *Env) Processes() ([]int, error) {
	if e.Dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	skip := map[int]bool{os.Getpid(): true}
	e.mu.Lock()
	if e.cmd != nil && e.cmd.Process != nil {
		skip[e.cmd.Process.Pid] = true
	}
	e.mu.Unlock()
	var pids []int
	for _, ent := range entries {
		var pid int
		if _, err := fmt.Sscanf(ent.Name(), "%d", &pid); err != nil || skip[pid] {
			continue
		}
		if e.ownsProcess(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func (e *Env) ownsProcess(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/", pid)
	if stat, err := os.ReadFile(dir + "stat"); err != nil || isZombie(stat) {
		return false
	}
	cmdline, _ := os.ReadFile(dir + "cmdline")
	args := strings.ReplaceAll(string(cmdline), "\x00", " ") + " "
	for _, d := range []string{e.Dir, e.socketDir} {
		if d != "" && (strings.Contains(args, d+"/") || strings.Contains(args, d+" ")) {
			return true
		}
	}
	cg, _ := os.ReadFile(dir + "cgroup")
	return e.CgroupParent != "" && strings.Contains(string(cg), ":"+e.CgroupParent+"/")
}

// isZombie reads the state field of /proc/<pid>/stat ("pid (comm) S ...").
func isZombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// killLeftovers SIGKILLs what the pods' removal did not end (a failed test,
// a wedged shim) and waits for it to go.
func (e *Env) killLeftovers() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := e.Processes()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes still alive after SIGKILL: %v", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(pollInterval)
	}
}

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	Point, FSType string
}

// mountsUnder lists the mounts at or below dir.
func mountsUnder(dir string) ([]mountInfo, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []mountInfo
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		sep := indexOf(f, "-")
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		p := unescapeMount(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, mountInfo{Point: p, FSType: f[sep+1]})
		}
	}
	return out, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder lazily unmounts everything below dir, deepest first, so the
// test's TempDir removal never walks into a live overlay or netns.
// UnmountUnder lazily unmounts every mount under dir, deepest first.
func UnmountUnder(dir string) error { return unmountUnder(dir) }

func unmountUnder(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" {
		return nil // a half-initialized Env: never touch the whole host
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Point) > len(mounts[j].Point) })
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m.Point, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.Point, err))
		}
	}
	return errors.Join(errs...)
}

// deleteBridge removes the CNI bridge, which the bridge plugin never does.
func (e *Env) deleteBridge() error {
	if _, err := net.InterfaceByName(e.Bridge); err != nil {
		return nil
	}
	if out, err := exec.Command(e.bins.ip, "link", "del", e.Bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link del %s: %v: %s", e.Bridge, err, out)
	}
	return nil
}

// removeCgroups removes CgroupParent in every hierarchy. runc removes the
// containers' cgroups but, like kubelet's pod cgroups, never their parent.
func (e *Env) removeCgroups() error { return RemoveCgroup(e.CgroupParent) }

// RemoveCgroup removes cgroup path (e.g. "/mypods") and everything under
// it from every hierarchy, deepest first.
func RemoveCgroup(path string) error {
	if path == "" || path == "/" {
		return nil // a half-initialized caller: never walk a hierarchy's root
	}
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	var errs []error
	for _, root := range roots {
		errs = append(errs, rmdirTree(filepath.Join(root, path)))
	}
	return errors.Join(errs...)
}

func cgroupRoots() ([]string, error) {
	mounts, err := mountsUnder("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			roots = append(roots, m.Point)
		}
	}
	return roots, nil
}

// rmdirTree removes a cgroup directory tree deepest first (cgroupfs only
// allows rmdir of directories without child cgroups).
func rmdirTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := rmdirCgroup(dirs[i]); err != nil {
			return fmt.Errorf("rmdir %s: %w", dirs[i], err)
		}
	}
	return nil
}

// rmdirCgroup removes one cgroup, retrying while it is busy: a process
// left in it (a container whose runtime died before it) is killed, and a
// cgroup whose last process just exited is released by the kernel a
// moment later.
func rmdirCgroup(dir string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			return nil
		case !errors.Is(err, unix.EBUSY) || time.Now().After(deadline):
			return fmt.Errorf("%w (processes in it: %v)", err, killCgroupProcs(dir))
		}
		killCgroupProcs(dir)
		time.Sleep(100 * time.Millisecond)
	}
}

// killCgroupProcs SIGKILLs the processes in a cgroup and returns them.
func killCgroupProcs(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			pids = append(pids, pid)
		}
	}
	return pids
}

// cleanCNICache removes libcni's cached results for our pods (normally
// gone after each pod's teardown, left when a test failed before that) and,
// if Start found no cache directory, the then empty directories it made.
// rmdir, not RemoveAll: another Env may be using them.
func (e *Env) cleanCNICache() error {
	if e.Network == "" {
		return nil
	}
	results := filepath.Join(cniCacheDir, "results")
	patterns := []string{e.Network + "-*"}
	for _, id := range e.sandboxIDs() {
		patterns = append(patterns, "*-"+id+"-*")
	}
	for _, pat := range patterns {
		stale, _ := filepath.Glob(filepath.Join(results, pat))
		for _, f := range stale {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	if !e.host.cniCacheExists {
		_ = unix.Rmdir(results)
		_ = unix.Rmdir(cniCacheDir)
	}
	return nil
}

// sandboxIDs lists the pod sandboxes CRI ever recorded under Dir.
func (e *Env) sandboxIDs() []string {
	var ids []string
	for _, base := range []string{"root", "state"} {
		ents, _ := os.ReadDir(filepath.Join(e.Dir, base, "io.containerd.grpc.v1.cri", "sandboxes"))
		for _, ent := range ents {
			ids = append(ids, ent.Name())
		}
	}
	return ids
}

// restoreIPForward undoes the bridge plugin's net.ipv4.ip_forward=1
// (isGateway turns it on) once no other Env's bridge is left, whichever
// test process made it.
func (e *Env) restoreIPForward() error {
	if e.host.ipForward != "0" || otherBridges(e.Bridge) {
		return nil
	}
	if err := os.WriteFile(ipForwardPath, []byte("0\n"), 0o644); err != nil {
		return fmt.Errorf("restore %s: %w", ipForwardPath, err)
	}
	return nil
}

func otherBridges(ours string) bool {
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if strings.HasPrefix(ifc.Name, namePrefix) && ifc.Name != ours {
			return true
		}
	}
	return false
}

// Image is an image built in Go. Unless NoBusybox, the rootfs has
// /bin/busybox with a symlink per applet, /etc/passwd and /etc/group, and
// Env gets a PATH if it has none.
type Image struct {
	Files      map[string]File // path in the rootfs -> content; overrides the defaults
	NoBusybox  bool
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
}

// File is a rootfs entry. Mode's type bits choose the kind: os.ModeDir for
// a directory, os.ModeSymlink for a symlink to string(Data), else a regular
// file (permissions 0644 when zero).
type File struct {
	Data []byte
	Mode os.FileMode
}

// ImportImage writes img as an OCI archive under Dir/images, imports it
// into the k8s.io namespace with ctr, and also names it repo@digest the way
// a registry pull does, so CRI's ImageStatus lists that in RepoDigests. It
// waits until CRI sees both names and returns the manifest digest
// ("sha256:..."), which is the image's target in containerd. ref needs a
// registry host and a tag, e.g. "sandlot.test/app:1", because CRI would
// otherwise normalize it to a different name (docker.io/library/...).
func (e *Env) ImportImage(t T, ref string, img Image) string {
	t.Helper()
	if err := checkRef(ref); err != nil {
		t.Fatalf("crienv: ImportImage: %v", err)
	}
	archive := filepath.Join(e.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	digest, err := writeOCIArchive(archive, ref, img)
	if err != nil {
		t.Fatalf("crienv: ImportImage %s: %v", ref, err)
	}
	e.importArchive(t, archive, ref, digest)
	return digest
}

// ImportArchive imports an OCI image archive (one image, ref in its
// index) made elsewhere, e.g. by hack/ociimage.
func (e *Env) ImportArchive(t T, archive, ref string) string {
	t.Helper()
	digest, err := oci.ManifestDigest(archive)
	if err != nil {
		t.Fatalf("crienv: ImportArchive %s: %v", archive, err)
	}
	e.importArchive(t, archive, ref, digest)
	return digest
}

func (e *Env) importArchive(t T, archive, ref, digest string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	// Not `import --digests`: it names the archive's index digest
	// import-<date>@sha256:..., not the manifest under ref's repository.
	repoDigest := ref[:strings.LastIndex(ref, ":")] + "@" + digest
	for _, args := range [][]string{{"images", "import", archive}, {"images", "tag", "--force", ref, repoDigest}} {
		if err := e.ctr(ctx, args...); err != nil {
			t.Fatalf("crienv: ImportImage %s: %v", ref, err)
		}
	}
	if err := e.waitImage(ctx, ref, repoDigest); err != nil {
		t.Fatalf("crienv: ImportImage %s: %v", ref, err)
	}
	if err := e.forgetOtherDigests(ctx, repoDigest); err != nil {
		t.Fatalf("crienv: ImportImage %s: %v", ref, err)
	}
}

// forgetOtherDigests removes the repo@digest names earlier imports of the
// same repository left: each would keep its image's content alive, and a
// cluster that `make up` refreshes again and again filled the disk with
// them (150 MiB per agent image per node) until the kubelets reported
// DiskPressure. Running containers keep their snapshots.
func (e *Env) forgetOtherDigests(ctx context.Context, repoDigest string) error {
	repo, _, _ := strings.Cut(repoDigest, "@")
	out, err := e.ctrOutput(ctx, "images", "ls", "-q")
	if err != nil {
		return err
	}
	var stale []string
	for _, name := range strings.Fields(out) {
		if strings.HasPrefix(name, repo+"@sha256:") && name != repoDigest {
			stale = append(stale, name)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return e.ctr(ctx, append([]string{"images", "rm"}, stale...)...)
}

// ctr runs `ctr -a <Address> -n k8s.io args...`.
func (e *Env) ctr(ctx context.Context, args ...string) error {
	_, err := e.ctrOutput(ctx, args...)
	return err
}

func (e *Env) ctrOutput(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.bins.ctr, append([]string{"-a", e.Address, "-n", Namespace}, args...)...)
	cmd.Env = e.containerdEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// checkRef wants a fully qualified, tagged reference.
func checkRef(ref string) error {
	host, rest, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return fmt.Errorf("ref %q: want a registry host, e.g. sandlot.test/name:tag", ref)
	}
	if !strings.Contains(path.Base(rest), ":") {
		return fmt.Errorf("ref %q: want a tag", ref)
	}
	return nil
}

// waitImage waits for CRI's image store, which learns about new image names
// from containerd's events, to know ref and list repoDigest.
func (e *Env) waitImage(ctx context.Context, ref, repoDigest string) error {
	for {
		st, err := e.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err == nil && st.Image != nil && slices.Contains(st.Image.RepoDigests, repoDigest) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRI does not list %s with %s (status %v, error %v): %w", ref, repoDigest, st.GetImage(), err, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// writeOCIArchive writes img as an OCI layout tar with one layer and
// returns the manifest's digest.
func writeOCIArchive(file, ref string, img Image) (string, error) {
	files, err := img.rootfs()
	if err != nil {
		return "", err
	}
	return oci.WriteArchive(file, ref, img.config(), func(w io.Writer) error { return writeLayer(w, files) })
}

func (img Image) config() oci.Config {
	env := img.Env
	if !img.NoBusybox && !hasPath(env) {
		env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	}
	return oci.Config{User: img.User, Env: env, Entrypoint: img.Entrypoint, Cmd: img.Cmd, WorkingDir: img.WorkingDir}
}

func hasPath(env []string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			return true
		}
	}
	return false
}

// rootfs merges the skeleton, busybox and the caller's files, keyed by
// clean relative paths.
func (img Image) rootfs() (map[string]File, error) {
	files := map[string]File{}
	for _, d := range []string{"bin", "dev", "etc", "proc", "root", "sys", "usr", "var"} {
		files[d] = File{Mode: os.ModeDir | 0o755}
	}
	files["tmp"] = File{Mode: os.ModeDir | os.ModeSticky | 0o777}
	if !img.NoBusybox {
		if err := addBusybox(files); err != nil {
			return nil, err
		}
	}
	for p, f := range img.Files {
		clean := strings.TrimPrefix(path.Clean("/"+p), "/")
		if clean == "" {
			return nil, fmt.Errorf("file path %q names the root", p)
		}
		files[clean] = f
	}
	return files, nil
}

var busybox struct {
	once    sync.Once
	data    []byte
	applets []string
	err     error
}

// loadBusybox reads the binary and its applet list once per test binary.
func loadBusybox() ([]byte, []string, error) {
	busybox.once.Do(func() {
		busybox.data, busybox.err = os.ReadFile(busyboxPath)
		if busybox.err != nil {
			return
		}
		out, err := exec.Command(busyboxPath, "--list").Output()
		if err != nil {
			busybox.err = fmt.Errorf("%s --list: %w", busyboxPath, err)
			return
		}
		busybox.applets = strings.Fields(string(out))
	})
	return busybox.data, busybox.applets, busybox.err
}

func addBusybox(files map[string]File) error {
	data, applets, err := loadBusybox()
	if err != nil {
		return err
	}
	files["bin/busybox"] = File{Data: data, Mode: 0o755}
	for _, a := range applets {
		if a != "busybox" && !strings.Contains(a, "/") {
			files["bin/"+a] = File{Data: []byte("busybox"), Mode: os.ModeSymlink | 0o777}
		}
	}
	files["usr/bin/env"] = File{Data: []byte("../../bin/busybox"), Mode: os.ModeSymlink | 0o777} // #!/usr/bin/env
	files["etc/passwd"] = File{Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")}
	files["etc/group"] = File{Data: []byte("root:x:0:\nnogroup:x:65534:\n")}
	return nil
}

// writeLayer tars files (adding missing parent directories) to w in a
// stable order.
func writeLayer(w io.Writer, files map[string]File) error {
	for p := range files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := files[d]; !ok {
				files[d] = File{Mode: os.ModeDir | 0o755}
			}
		}
	}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names) // a parent sorts before its children
	tw := tar.NewWriter(w)
	for _, name := range names {
		if err := writeRootfsEntry(tw, name, files[name]); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return tw.Close()
}

// layerTime is every entry's mtime, so the same Image gives the same digest.
var layerTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func writeRootfsEntry(tw *tar.Writer, name string, f File) error {
	h := &tar.Header{Name: name, ModTime: layerTime, Mode: tarMode(f.Mode), Format: tar.FormatPAX}
	switch {
	case f.Mode.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case f.Mode&os.ModeSymlink != 0:
		h.Typeflag, h.Linkname = tar.TypeSymlink, string(f.Data)
	default:
		h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		if f.Mode.Perm() == 0 {
			h.Mode |= 0o644
		}
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeReg {
		_, err := tw.Write(f.Data)
		return err
	}
	return nil
}

// tarMode converts Go's mode bits to the tar (unix) ones.
func tarMode(m os.FileMode) int64 {
	mode := int64(m.Perm())
	if m&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// PodConfig is the config RunPod uses: a fresh UID, namespace "default",
// hostname name, logs under Dir/pods, the Env's cgroup parent, and the
// namespaces kubelet asks for (network and IPC per pod, PID per container).
func (e *Env) PodConfig(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	uid := newUID()
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "default"},
		Hostname:     name,
		LogDirectory: filepath.Join(e.Dir, "pods", "default_"+name+"_"+uid),
		Labels: map[string]string{
			"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": uid,
		},
		Annotations: annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: e.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

// newUID is a random RFC 4122 version 4 UUID, like a pod's UID.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// RunPod runs a pod sandbox with PodConfig(name, annotations) and the
// runtime handler ("runc", "sandlot", or "" for the default).
func (e *Env) RunPod(t T, name, handler string, annotations map[string]string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	cfg := e.PodConfig(name, annotations)
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := e.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("crienv: RunPodSandbox %s (handler %q): %v", name, handler, err)
	}
	return resp.PodSandboxId, cfg
}

// PodIP is the pod's IP from PodSandboxStatus.
func (e *Env) PodIP(t T, podID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	st, err := e.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatalf("crienv: PodSandboxStatus %s: %v", podID, err)
	}
	ip := st.GetStatus().GetNetwork().GetIp()
	if ip == "" {
		t.Fatalf("crienv: pod %s has no IP", podID)
	}
	return ip
}

// ContainerConfig is the config CreateStart uses: the pod's namespaces,
// the log at <pod log dir>/<name>/0.log as kubelet names it.
func ContainerConfig(cfg *runtimeapi.PodSandboxConfig, name, image string, envs map[string]string) *runtimeapi.ContainerConfig {
	keys := make([]string, 0, len(envs))
	for k := range envs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	kvs := make([]*runtimeapi.KeyValue, 0, len(keys))
	for _, k := range keys {
		kvs = append(kvs, &runtimeapi.KeyValue{Key: k, Value: []byte(envs[k])})
	}
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Envs:     kvs,
		LogPath:  filepath.Join(name, "0.log"),
		Labels:   map[string]string{"io.kubernetes.container.name": name},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
	}
}

// ContainerLogPath is where CRI writes the log of the container name that
// CreateStart made in the pod with cfg.
func ContainerLogPath(cfg *runtimeapi.PodSandboxConfig, name string) string {
	return filepath.Join(cfg.LogDirectory, name, "0.log")
}

// CreateStart creates and starts a container running image's own command
// and returns its ID.
func (e *Env) CreateStart(t T, podID string, cfg *runtimeapi.PodSandboxConfig, name, image string, envs map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	c, err := e.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID, Config: ContainerConfig(cfg, name, image, envs), SandboxConfig: cfg,
	})
	if err != nil {
		t.Fatalf("crienv: CreateContainer %s in pod %s: %v", name, podID, err)
	}
	if _, err := e.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatalf("crienv: StartContainer %s (%s): %v", name, c.ContainerId, err)
	}
	return c.ContainerId
}

// ContainerState is the container's CRI state.
func (e *Env) ContainerState(t T, containerID string) runtimeapi.ContainerState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	st, err := e.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
	if err != nil {
		t.Fatalf("crienv: ContainerStatus %s: %v", containerID, err)
	}
	return st.GetStatus().GetState()
}

// ExecSync runs cmd in the container (10 s timeout) and returns its output
// and exit code; a failing RPC fails the test.
func (e *Env) ExecSync(t T, containerID string, cmd ...string) (stdout, stderr string, exitCode int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout+5*time.Second)
	defer cancel()
	resp, err := e.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: containerID, Cmd: cmd, Timeout: int64(execTimeout / time.Second),
	})
	if err != nil {
		t.Fatalf("crienv: ExecSync %v in %s: %v", cmd, containerID, err)
	}
	return string(resp.Stdout), string(resp.Stderr), resp.ExitCode
}

// RemovePod stops and removes the pod sandbox and its containers.
func (e *Env) RemovePod(t T, podID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if err := e.removePod(ctx, podID); err != nil {
		t.Fatalf("crienv: %v", err)
	}
}

// directHTTP never uses a proxy from the environment: pod IPs are only
// reachable from this host.
var directHTTP = &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}

// WaitHTTP polls GET url every 20 ms until any HTTP answer arrives. It
// ignores HTTP(S)_PROXY.
func WaitHTTP(ctx context.Context, url string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := directHTTP.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("GET %s: no answer: %w (last: %v)", url, ctx.Err(), err)
		case <-time.After(pollInterval):
		}
	}
}

// MakeBridge creates an up bridge with addr (CIDR), its MAC pinned, as
// the CNI bridge plugin does: a bridge's MAC otherwise follows its lowest
// port's as pods come and go.
func MakeBridge(name, addr string) error {
	ip := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := ip("link", "add", name, "type", "bridge"); err != nil {
		return err
	}
	mac, err := os.ReadFile(filepath.Join("/sys/class/net", name, "address"))
	if err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "set", name, "address", strings.TrimSpace(string(mac))},
		{"addr", "add", addr, "dev", name},
		{"link", "set", name, "up"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	return nil
}

// MakeCgroup creates cgroup path in every hierarchy (a kubelet's
// cgroupRoot must exist). A v1 cpuset child starts with no CPUs or memory
// nodes: it gets its parent's.
func MakeCgroup(path string) error {
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	for _, root := range roots {
		dir := filepath.Join(root, path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				continue // not a cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// StartHeld starts cmd from a goroutine that keeps its OS thread until cmd
// exits, then calls exited with Wait's error. Pdeathsig fires when the
// forking *thread* exits: holding it keeps another goroutine from locking
// it and ending it (as netns code does) under the process.
func StartHeld(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}
