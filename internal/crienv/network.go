package crienv

// The CNI bridge network: subnet checks, the conflist, the bridge itself
// (MakeBridge), and undoing what pods did to the host network (the bridge,
// libcni's result cache, net.ipv4.ip_forward).

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

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

// cniConfig is the bridge network: the bridge plugin sets the gateway
// address on the bridge (isGateway) and pins its MAC; host-local keeps its
// leases under Dir.
type cniConfig struct {
	CNIVersion string           `json:"cniVersion"`
	Name       string           `json:"name"`
	Plugins    []map[string]any `json:"plugins"`
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
