package crienv

// Where an Env keeps its state (Dir, the socket directories) and the names
// of its host objects (bridge, CNI network, cgroup parent, subnet), all
// derived from Dir so two Envs never collide.

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
)

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

// setupNames derives bridge, network and cgroup names from Dir, so two Envs
// never share them, and checks that the subnet is free.
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
