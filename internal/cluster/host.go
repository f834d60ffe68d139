package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandlot-dev/sandlot/internal/crienv"
)

// saveBaseline records the host's iptables before the cluster touches
// them and restores them last (kubelets and kube-proxy add chains that
// outlive them), and removes the files the kubelet writes outside its
// root dir.
func (c *Cluster) saveBaseline(t crienv.T) error {
	dir := filepath.Join(c.Dir, "baseline")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(tool + "-save").Output()
		if err != nil {
			return fmt.Errorf("%s-save: %w", tool, err)
		}
		if err := os.WriteFile(filepath.Join(dir, tool), out, 0o600); err != nil {
			return err
		}
	}
	hadLogs := exists("/var/log/containers")
	hadSock := exists(deviceSocket)
	t.Cleanup(func() {
		for _, tool := range []string{"iptables", "ip6tables"} {
			if err := restoreIptables(tool, filepath.Join(dir, tool)); err != nil {
				t.Errorf("cluster: %v", err)
			}
		}
		if !hadLogs {
			_ = os.RemoveAll("/var/log/containers")
		}
		if !hadSock {
			_ = os.Remove(deviceSocket)
		}
		// Gone once restored: a later sweep must not replay an old baseline.
		_ = os.RemoveAll(dir)
	})
	return nil
}

// deviceSocket is the kubelet's device-plugin socket, at a fixed path.
const deviceSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// restoreIptables puts back a saved dump. iptables-restore only replaces
// the tables in the dump; a table the cluster made (the nf_tables backend
// creates them on first use: the kubelet's mangle chains) is flushed and
// its chains deleted.
func restoreIptables(tool, saved string) error {
	b, err := os.ReadFile(saved)
	if err != nil {
		return err
	}
	cmd := exec.Command(tool + "-restore")
	cmd.Stdin = strings.NewReader(string(b))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s-restore: %w: %s", tool, err, out)
	}
	had := tables(string(b))
	now, err := exec.Command(tool + "-save").Output()
	if err != nil {
		return fmt.Errorf("%s-save: %w", tool, err)
	}
	for table := range tables(string(now)) {
		if had[table] {
			continue
		}
		for _, op := range []string{"-F", "-X"} {
			if out, err := exec.Command(tool, "-t", table, op).CombinedOutput(); err != nil {
				return fmt.Errorf("%s -t %s %s: %w: %s", tool, table, op, err, out)
			}
		}
	}
	return nil
}

// tables are the tables an iptables-save dump lists ("*filter" lines).
func tables(dump string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(dump, "\n") {
		if name, ok := strings.CutPrefix(l, "*"); ok {
			out[name] = true
		}
	}
	return out
}

// HostState is what a cluster may change on the host, to compare before
// and after: links, addresses, routes, network namespaces, mounts,
// iptables rules, top-level cgroups and cluster processes.
type HostState map[string][]string

// SnapshotHost reads the host's state.
func SnapshotHost() HostState {
	s := HostState{}
	s["links"] = lines("ip", "-o", "link", "show")
	s["addresses"] = lines("ip", "-o", "addr", "show")
	s["routes"] = lines("ip", "route", "show", "table", "all")
	s["iptables"] = lines("iptables-save")
	s["ip6tables"] = lines("ip6tables-save")
	s["netns"] = globLines("/run/netns/*")
	s["cgroups"] = globLines("/sys/fs/cgroup/*/*/")
	s["mounts"] = mountPoints()
	s["processes"] = clusterProcesses()
	for k, v := range s {
		s[k] = normalize(k, v)
	}
	return s
}

// Diff lists what differs between two states.
func (before HostState) Diff(after HostState) []string {
	var out []string
	for k, b := range before {
		have := map[string]bool{}
		for _, l := range b {
			have[l] = true
		}
		for _, l := range after[k] {
			if !have[l] {
				out = append(out, fmt.Sprintf("%s: new %q", k, l))
			}
		}
	}
	sort.Strings(out)
	return out
}

func lines(name string, args ...string) []string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return []string{fmt.Sprintf("%s failed: %v", name, err)}
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func globLines(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

func mountPoints() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	return out
}

// clusterProcesses are running binaries a cluster starts.
func clusterProcesses() []string {
	var out []string
	names := map[string]bool{"etcd": true, "kube-apiserver": true, "kube-controller": true, "kube-scheduler": true,
		"kubelet": true, "kube-proxy": true, "containerd": true, "containerd-shim": true, "qemu-system-x86": true, "sandlot-controll": true}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && names[strings.TrimSpace(string(comm))] {
			out = append(out, strings.TrimSpace(string(comm)))
		}
	}
	return out
}

// normalize drops what changes on its own: counters in iptables dumps,
// comment lines, link statistics.
func normalize(kind string, in []string) []string {
	var out []string
	for _, l := range in {
		switch {
		case strings.HasPrefix(l, "#"):
			continue
		case kind == "iptables" || kind == "ip6tables":
			if i := strings.Index(l, " ["); strings.HasPrefix(l, ":") && i > 0 {
				l = l[:i]
			}
			// An empty table (headers, built-in chains accepting) is
			// no rule: nf_tables keeps tables once made.
			if strings.HasPrefix(l, "*") || l == "COMMIT" || builtinAccept(l) {
				continue
			}
		}
		out = append(out, l)
	}
	return out
}

func builtinAccept(l string) bool {
	for _, c := range []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"} {
		if l == ":"+c+" ACCEPT" {
			return true
		}
	}
	return false
}
