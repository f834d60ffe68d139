package node

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Config is the node's shim configuration: a JSON file named by the
// runtime's `ConfigPath` option in containerd's config (as Kata does). The
// agent's installer writes it; the shim reads it at each pod.
type Config struct {
	// Root is the Layout's root (default DefaultRoot).
	Root string `json:"root"`
	// ImageDir caches one ext4 base disk per image digest (default
	// /var/lib/sandlot/images).
	ImageDir string `json:"imageDir"`
	// MemoryDir is a tmpfs directory for guest RAM (default /dev/shm).
	MemoryDir string `json:"memoryDir"`
	QEMU      string `json:"qemu"`
	Kernel    string `json:"kernel"`
	Initrd    string `json:"initrd"`
	// Modules is the guest's SANDLOT_MODULES boot parameter.
	Modules string `json:"modules"`
	// Accel forces kvm or tcg; "" detects.
	Accel string `json:"accel"`
	// DefaultMemoryMiB and DefaultVCPU size a VM whose pod does not say.
	DefaultMemoryMiB int `json:"defaultMemoryMiB"`
	DefaultVCPU      int `json:"defaultVCPU"`
	// LayerMiB sizes a cold-booted VM's writable layer (default 1024).
	LayerMiB int `json:"layerMiB"`
	// DiskDir holds each VM's writable layer and console log, one
	// directory per pod: on a disk, not in node RAM (default
	// /var/lib/sandlot/vms).
	DiskDir string `json:"diskDir"`
	// VMUIDs are the uids (and same-numbered gids) jailed QEMUs run as,
	// one per running VM on the node; VMMGroup is a group all of them are
	// in, which may read the shared inputs (base disks, base memory).
	VMUIDs   IDRange `json:"vmUIDs"`
	VMMGroup int     `json:"vmmGroup"`
	// VolumeDir is where the cluster's E2B volumes are on this node: a
	// filesystem every node mounts at this path (the chart's
	// volumes.hostPath), each volume at <VolumeDir>/<namespace>/<uid>.
	// Empty: sandboxes here cannot mount volumes.
	VolumeDir string `json:"volumeDir,omitempty"`
	// AgentSocket is the node agent's stage socket (stageapi). With it a
	// restore asks the agent for its data (downloaded first when another
	// node wrote it); without it the pod's restore-location annotation
	// must be a directory on this node.
	AgentSocket string `json:"agentSocket,omitempty"`
	// Network is the traffic policy every sandbox on the node starts
	// from, enforced on its tap; a sandbox's spec.network adds to it.
	Network NetworkConfig `json:"network"`
	// ShimMemoryMaxMiB caps each pod's shim process: its own cgroup's
	// memory.max, outside the pod's (nil: DefaultShimMemoryMaxMiB; 0: the
	// shim stays in containerd's cgroup, uncapped). The shim reads it.
	ShimMemoryMaxMiB *int `json:"shimMemoryMaxMiB,omitempty"`
}

// The cap on a shim's own memory: by default, and the least a shim runs
// in.
const (
	DefaultShimMemoryMaxMiB = 128
	MinShimMemoryMaxMiB     = 64
)

// NetworkConfig is the node's default sandbox traffic policy.
type NetworkConfig struct {
	// DenyOut are the platform's denials: CIDRs no sandbox may open
	// connections to, whatever its rules or its resolver's answers say
	// (nil: DefaultDenyOut; empty, not omitted: none, as sandlot-api's
	// --deny-out= reads it). The node's own addresses are always denied.
	DenyOut []string `json:"denyOut"`
	// OpenOut are ranges inside DenyOut a sandbox's allowOut (a CIDR, or
	// a domain's answer) may open: an internal service the operator lets
	// sandboxes reach.
	OpenOut []string `json:"openOut,omitempty"`
	// IngressFrom are the CIDRs that may open connections to any sandbox,
	// besides the node itself (where sandlot-api's proxy runs).
	IngressFrom []string `json:"ingressFrom,omitempty"`
	// IngressOpen lets anyone open connections to every sandbox.
	IngressOpen bool `json:"ingressOpen,omitempty"`
	// ResolveWhenClosed are names (allowOut's domain form: "name" or
	// "*.suffix") a sandbox's resolver still answers when its egress is
	// closed, where it answers no other name (cluster names a workload
	// looks up). An answer opens nothing.
	ResolveWhenClosed []string `json:"resolveWhenClosed,omitempty"`
	// UpstreamCAFile is a PEM file on the node of CAs the egress proxy
	// trusts besides the system's when it verifies the upstreams of a
	// sandbox's header rules (a private API's CA).
	UpstreamCAFile string `json:"upstreamCAFile,omitempty"`
}

// resolvableName is a domain in allowOut's form, lower case.
var resolvableName = regexp.MustCompile(`^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// checkResolvable refuses a ResolveWhenClosed entry that is no domain.
func (n NetworkConfig) checkResolvable() error {
	for _, d := range n.ResolveWhenClosed {
		if len(d) > 253 || !resolvableName.MatchString(d) {
			return fmt.Errorf("network.resolveWhenClosed %q: want a lower-case domain, or *. and one", d)
		}
	}
	return nil
}

// DefaultDenyOut: link-local (the cloud metadata address), private and
// shared ranges (pods, services and nodes live there), loopback, this
// network, multicast and reserved: a sandbox reaches public addresses.
var DefaultDenyOut = []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4"}

// IDRange is Count ids from First.
type IDRange struct {
	First int `json:"first"`
	Count int `json:"count"`
}

// Default jail ids: above the ranges distributions hand to users and
// subordinate ids (useradd's SUB_UID_MAX is 600100000).
const (
	DefaultVMUIDFirst = 700000000
	DefaultVMUIDCount = 65536
	DefaultVMMGroup   = DefaultVMUIDFirst - 1
)

// PodDiskDir is where one pod's VM keeps its writable layer and console.
func (c Config) PodDiskDir(podUID string) string { return filepath.Join(c.DiskDir, podUID) }

// Layout is the on-node layout the config's root gives.
func (c Config) Layout() Layout { return Layout{Root: c.Root} }

// Defaults fills in what the file leaves out.
func (c *Config) Defaults() {
	if c.Root == "" {
		c.Root = DefaultRoot
	}
	if c.ImageDir == "" {
		c.ImageDir = "/var/lib/sandlot/images"
	}
	if c.MemoryDir == "" {
		c.MemoryDir = "/dev/shm"
	}
	if c.DefaultMemoryMiB == 0 {
		c.DefaultMemoryMiB = 512
	}
	if c.DefaultVCPU == 0 {
		c.DefaultVCPU = 1
	}
	if c.LayerMiB == 0 {
		c.LayerMiB = 1024
	}
	if c.DiskDir == "" {
		c.DiskDir = "/var/lib/sandlot/vms"
	}
	if c.VMUIDs == (IDRange{}) {
		c.VMUIDs = IDRange{First: DefaultVMUIDFirst, Count: DefaultVMUIDCount}
	}
	if c.VMMGroup == 0 {
		c.VMMGroup = DefaultVMMGroup
	}
	if c.Network.DenyOut == nil {
		c.Network.DenyOut = slices.Clone(DefaultDenyOut)
	}
}

// Validate refuses what no shim can run with: a missing kernel or
// initramfs name, relative paths, an unknown accel. (Whether the files
// exist is the reader's check: the installer writes the config before it
// copies them.)
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name, path string
		required   bool
	}{
		{"kernel", c.Kernel, true}, {"initrd", c.Initrd, true}, {"root", c.Root, false},
		{"imageDir", c.ImageDir, false}, {"memoryDir", c.MemoryDir, false},
		{"agentSocket", c.AgentSocket, false}, {"qemu", c.QEMU, false}, {"diskDir", c.DiskDir, false},
	} {
		switch {
		case f.path == "" && f.required:
			errs = append(errs, fmt.Errorf("shim config: %s is required", f.name))
		case f.path != "" && !filepath.IsAbs(f.path):
			errs = append(errs, fmt.Errorf("shim config: %s %q: want an absolute path", f.name, f.path))
		}
	}
	if r := c.VMUIDs; r != (IDRange{}) && (r.First < 1 || r.Count < 1 || r.First+r.Count > 1<<31-1) {
		errs = append(errs, fmt.Errorf("shim config: vmUIDs %d+%d: want first ≥ 1, count ≥ 1, below 2^31", r.First, r.Count))
	}
	if g := c.VMMGroup; g < 0 || (g > 0 && g >= c.VMUIDs.First && g < c.VMUIDs.First+c.VMUIDs.Count) {
		errs = append(errs, fmt.Errorf("shim config: vmmGroup %d: want > 0 and outside vmUIDs", g))
	}
	if _, err := c.Network.Ingress(); err != nil {
		errs = append(errs, fmt.Errorf("shim config: %w", err))
	}
	if err := c.Network.checkResolvable(); err != nil {
		errs = append(errs, fmt.Errorf("shim config: %w", err))
	}
	if _, err := c.Network.Egress(); err != nil {
		errs = append(errs, fmt.Errorf("shim config: %w", err))
	}
	if m := c.ShimMemoryMaxMiB; m != nil && *m != 0 && *m < MinShimMemoryMaxMiB {
		errs = append(errs, fmt.Errorf("shim config: shimMemoryMaxMiB %d: want 0 (no cap) or at least %d", *m, MinShimMemoryMaxMiB))
	}
	if c.Accel != "" && c.Accel != "kvm" && c.Accel != "tcg" {
		errs = append(errs, fmt.Errorf("shim config: accel %q: want kvm, tcg or empty (detect)", c.Accel))
	}
	return errors.Join(errs...)
}

// Ingress parses IngressFrom (IPv4 CIDRs or addresses); Egress parses
// the rest.
func (n NetworkConfig) Ingress() ([]netip.Prefix, error) {
	return ParsePrefixes("network.ingressFrom", n.IngressFrom)
}

// ParsePrefixes parses IPv4 CIDRs without host bits or addresses; an
// error names field and the entry.
func ParsePrefixes(field string, in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%s %q: want an IPv4 CIDR or address", field, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() || p.Masked() != p {
			return nil, fmt.Errorf("%s %q: want an IPv4 CIDR without host bits", field, s)
		}
		out = append(out, p)
	}
	return out, nil
}

// SplitList is a comma-separated flag value's entries, trimmed (empty:
// none, not nil: a flag given empty means "no entries", not "default").
func SplitList(v string) []string {
	out := []string{}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
