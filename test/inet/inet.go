// Package inet is a "test internet" for a cluster's pods: a network
// namespace on the host with TEST-NET addresses (web hosts, a DNS zone the
// pods use, a metadata-like server on 169.254.169.254, a UDP counter and a
// TCP sink for throughput), reached through the host as the real one would
// be. test/network tries the sandboxes' network policy against it and
// bench-network measures the filter's cost on it; no traffic leaves the
// machine.
package inet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/internal/crienv"
)

// The test internet's addresses: documentation ranges (TEST-NET-2 and -3),
// public as far as the node's defaults go, and the metadata address.
const (
	HostSide  = "198.51.100.1" // the host's end of the veth pair
	InetSide  = "198.51.100.2" // the netns's end; the UDP counter listens here
	IPPublic  = "198.51.100.10"
	IPAllowed = "198.51.100.20" // api.allowed.test
	IPWild    = "198.51.100.21" // x.wild.test: its own address, so *.wild.test is tried on its own
	IPDNS     = "198.51.100.53"
	IPRange   = "203.0.113.5" // denied.test, in TEST-NET-3
	IPMeta    = "169.254.169.254"
	// IPPrivate is what private.allowed.test answers: the test cluster's
	// kubernetes Service (cluster.ServiceCIDR's first address), inside
	// the platform's denials.
	IPPrivate = "10.0.0.1"
	RangeNet  = "203.0.113.0/24"
	PodPrefix = "10.246" // cluster.Options.Prefix: pods are 10.246.<node>.x
	UDPPort   = 9999
	// Policy routing takes the pods' traffic for 203.0.113.0/24 and the
	// metadata address to the netns (a table of this run's own, so the
	// host keeps its own route to a real metadata service).
	tableBase    = 0x53000000
	rulePriority = "1500"
	namePrefix   = "sl-inet-" // netns names and iptables comments: sl-inet-<pid>
)

// internet is the test internet of this process: a netns joined to the
// host, its servers, and what reached them.
type Internet struct {
	pid     int
	closers []func() error

	mu     sync.Mutex
	conns  []arrival
	frames []Datagram
	asked  map[string]bool // names the DNS server was asked, lower-case
}

// arrival is a TCP connection a test internet server accepted.
type arrival struct {
	local, remote string // IPs
	at            time.Time
}

// Datagram is a UDP packet the counter on InetSide received.
type Datagram struct{ Payload, From string }

func (x *Internet) netns() string  { return namePrefix + strconv.Itoa(x.pid) }
func (x *Internet) NsPath() string { return "/run/netns/" + x.netns() }

func vethName(pid int) string { return "slinet" + strconv.Itoa(pid) } // <= 13 chars

// Start builds the test internet before the cluster starts; t's
// cleanups remove it after the cluster is gone.
func Start(t crienv.T) *Internet {
	t.Helper()
	for _, tool := range []string{"ip", "iptables", "iptables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install iproute2 and iptables", tool)
		}
	}
	if err := sweepInternets(); err != nil {
		t.Fatalf("remove a killed run's test internet: %v", err)
	}
	x := &Internet{pid: os.Getpid()}
	// Registered first: a half-built internet is removed too.
	t.Cleanup(func() {
		if err := x.teardown(); err != nil {
			t.Errorf("test internet: %v", err)
		}
	})
	if err := x.plumb(); err != nil {
		t.Fatalf("test internet: %v", err)
	}
	if err := x.serve(); err != nil {
		t.Fatalf("test internet: servers: %v", err)
	}
	if err := x.serveSecure(); err != nil {
		t.Fatalf("test internet: the secure host: %v", err)
	}
	if err := x.serveSocks(); err != nil {
		t.Fatalf("test internet: the SOCKS5 host: %v", err)
	}
	if err := x.serveGit(); err != nil {
		t.Fatalf("test internet: the git host: %v", err)
	}
	if err := x.selfCheck(); err != nil {
		t.Fatalf("test internet: from the host: %v", err)
	}
	return x
}

// plumb makes the netns, the veth pair, addresses, routes and the FORWARD
// rules (a host with a DROP policy would otherwise eat the pods' traffic).
func (x *Internet) plumb() error {
	ns, veth, table := x.netns(), vethName(x.pid), strconv.Itoa(tableBase+x.pid)
	if err := newNetns(x.NsPath()); err != nil {
		return fmt.Errorf("netns %s: %w", ns, err)
	}
	steps := [][]string{
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"addr", "add", HostSide + "/24", "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", InetSide + "/24", "dev", "eth0"},
	}
	addrs := []string{IPPublic, IPAllowed, IPWild, IPDNS, IPRange, IPMeta, IPSecure, IPSocks, IPNoSocks, IPGit}
	for i := range BenchDomains {
		_, ip := BenchDomain(i)
		addrs = append(addrs, ip)
	}
	for _, a := range addrs {
		steps = append(steps, []string{"-n", ns, "addr", "add", a + "/32", "dev", "eth0"})
	}
	steps = append(steps,
		[]string{"-n", ns, "link", "set", "eth0", "up"},
		[]string{"-n", ns, "route", "add", "default", "via", HostSide},
		[]string{"route", "add", RangeNet, "via", InetSide, "dev", veth, "onlink", "table", table},
		[]string{"route", "add", IPMeta + "/32", "via", InetSide, "dev", veth, "onlink", "table", table},
		[]string{"rule", "add", "from", PodPrefix + ".0.0/16", "lookup", table, "priority", rulePriority},
	)
	for _, s := range steps {
		if err := run("ip", s...); err != nil {
			return err
		}
	}
	for _, r := range [][]string{{"-o", veth, "-d"}, {"-i", veth, "-s"}} {
		for _, cidr := range []string{"198.51.100.0/24", RangeNet, IPMeta + "/32"} {
			args := append([]string{"-I", "FORWARD"}, r...)
			args = append(args, cidr, "-m", "comment", "--comment", x.netns(), "-j", "ACCEPT")
			if err := run("iptables", args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// teardown stops the servers, then removes what plumb made.
func (x *Internet) teardown() error {
	var errs []error
	for i := len(x.closers) - 1; i >= 0; i-- {
		errs = append(errs, x.closers[i]())
	}
	return errors.Join(append(errs, removeInternet(x.pid))...)
}

// removeInternet removes the test internet of process pid, whatever of it
// exists: its FORWARD rules, policy rule, veth pair (its routes go with
// it) and netns.
func removeInternet(pid int) error {
	name := namePrefix + strconv.Itoa(pid)
	errs := []error{deleteIptables(func(comment string) bool { return comment == name })}
	tables, err := ruleTables()
	errs = append(errs, err)
	for _, tbl := range tables {
		if tbl == tableBase+pid {
			errs = append(errs, run("ip", "rule", "del", "table", strconv.Itoa(tbl)))
		}
	}
	if exists(filepath.Join("/sys/class/net", vethName(pid))) {
		errs = append(errs, run("ip", "link", "del", vethName(pid)))
	}
	if path := "/run/netns/" + name; exists(path) {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", path, err))
		}
		errs = append(errs, os.Remove(path))
	}
	return errors.Join(errs...)
}

func exists(path string) bool { _, err := os.Lstat(path); return err == nil }

// newNetns makes a named network namespace as containerd does: a new
// netns bind-mounted onto path. (`ip netns add` also turns /run/netns into
// a shared mount point, which outlives the run and the host check.)
func newNetns(path string) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, left in the new netns, exits with
		// this goroutine.
		runtime.LockOSThread()
		errc <- func() error {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL, 0o444)
			if err != nil {
				return err
			}
			f.Close()
			return unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
		}()
	}()
	return <-errc
}

// sweepInternets removes the test internets of processes that are gone
// (a killed run never ran its cleanups).
func sweepInternets() error {
	pids := map[int]bool{}
	nss, _ := filepath.Glob("/run/netns/" + namePrefix + "*")
	for _, ns := range nss {
		if pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(ns), namePrefix)); err == nil {
			pids[pid] = true
		}
	}
	tables, err := ruleTables()
	if err != nil {
		return err
	}
	for _, tbl := range tables {
		pids[tbl-tableBase] = true
	}
	errs := []error{deleteIptables(func(comment string) bool {
		pid, err := strconv.Atoi(strings.TrimPrefix(comment, namePrefix))
		return strings.HasPrefix(comment, namePrefix) && err == nil && pid != os.Getpid() && !alive(pid)
	})}
	for pid := range pids {
		if pid != os.Getpid() && !alive(pid) {
			errs = append(errs, removeInternet(pid))
		}
	}
	return errors.Join(errs...)
}

func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return pid > 0 && (err == nil || errors.Is(err, unix.EPERM))
}

// ruleTables are the tables of the host's policy rules that are a test
// internet's (one entry per rule).
func ruleTables() ([]int, error) {
	out, err := output("ip", "rule", "show")
	if err != nil {
		return nil, err
	}
	var tables []int
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		for i := 0; i+1 < len(f); i++ {
			if n, err := strconv.Atoi(f[i+1]); f[i] == "lookup" && err == nil && n > tableBase {
				tables = append(tables, n)
			}
		}
	}
	return tables, nil
}

// deleteIptables deletes the filter table's rules whose comment match
// accepts (iptables-save's rule, -A turned into -D).
func deleteIptables(match func(comment string) bool) error {
	out, err := output("iptables-save", "-t", "filter")
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		for i := range f {
			f[i] = strings.Trim(f[i], `"`)
		}
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "--comment" && match(f[i+1]) {
				errs = append(errs, run("iptables", append([]string{"-t", "filter", "-D"}, f[1:]...)...))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// output runs a command and returns its stdout; a failure is an error
// naming the command, with its exit status and stderr.
func output(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
