package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// CPUFingerprint digests the host CPU's model and flags: a restored VM
// sees the same CPU as the VM it was taken from.
func CPUFingerprint() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	var model, flags string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "model name":
			model = strings.TrimSpace(v)
		case "flags":
			flags = strings.TrimSpace(v)
		}
		if model != "" && flags != "" {
			break
		}
	}
	sum := sha256.Sum256([]byte(model + "\n" + flags))
	return hex.EncodeToString(sum[:8])
}

var (
	qemuVersions   sync.Map // binary -> version
	versionPattern = "QEMU emulator version "
)

// QEMUVersion is the version `qemu --version` prints, cached per binary.
func QEMUVersion(bin string) (string, error) { return QEMUVersionIn("", bin) }

// QEMUVersionIn is QEMUVersion of the QEMU of the root filesystem at root
// ("" is this one): run chrooted there, with that system's libraries —
// how a node agent in a container reads its node's QEMU (the node's / is
// mounted in the container).
func QEMUVersionIn(root, bin string) (string, error) {
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	key := root + "\x00" + bin
	if v, ok := qemuVersions.Load(key); ok {
		return v.(string), nil
	}
	cmd, err := RootCommand(root, bin, "--version")
	if err != nil {
		return "", err
	}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version in %q (is qemu-system-x86 installed?): %w", bin, root, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	v, ok := strings.CutPrefix(first, versionPattern)
	if !ok {
		return "", fmt.Errorf("%s --version: unexpected %q", bin, first)
	}
	v, _, _ = strings.Cut(v, " ")
	qemuVersions.Store(key, v)
	return v, nil
}

// rootPATH is where RootCommand looks for a program in another root.
var rootPATH = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// RootCommand is a command run chrooted in root ("" is this root) with
// that system's programs and libraries: a container with a node's / at
// root runs the node's own QEMU or systemctl. The program is looked up
// in root's PATH directories, not this one's.
func RootCommand(root, name string, args ...string) (*exec.Cmd, error) {
	if root == "" {
		return exec.Command(name, args...), nil
	}
	path := name
	if !strings.Contains(name, "/") {
		path = ""
		for _, dir := range rootPATH {
			if fi, err := os.Stat(filepath.Join(root, dir, name)); err == nil && fi.Mode()&0o111 != 0 {
				path = filepath.Join(dir, name)
				break
			}
		}
		if path == "" {
			return nil, fmt.Errorf("%s: not found in %s's %s", name, root, strings.Join(rootPATH, ":"))
		}
	}
	cmd := &exec.Cmd{Path: path, Args: append([]string{name}, args...), Dir: "/",
		Env:         []string{"PATH=" + strings.Join(rootPATH, ":")},
		SysProcAttr: &syscall.SysProcAttr{Chroot: root}}
	return cmd, nil
}

// syncDir makes the entries of dir (a create, a rename) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
