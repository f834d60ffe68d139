// Package jail starts a VMM as an unprivileged process that can see only
// its own VM's files: its own uid and gid, no capabilities (an empty
// bounding set and no_new_privs), a mount namespace whose root is a fresh
// tmpfs holding bind mounts of the paths it was given, inside the cgroups
// it was given, with the OOM score it was given.
//
// Go cannot run code between fork and exec, so the jail is set up by a
// helper: the calling binary itself, re-executed with argv[0] = Argv0 in a
// new mount namespace. Any binary that imports this package (the shim,
// the tests and benchmarks that use vm/) runs the helper from its init.
package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Argv0 marks the helper process.
const Argv0 = "sandlot-vmm-jail"

// Spec is one jailed VMM.
type Spec struct {
	// Path is the VMM binary (absolute); Args its arguments (without it),
	// Env its whole environment.
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	// UID, GID and Groups are the VMM's credentials; UID and GID must not
	// be 0.
	UID    int   `json:"uid"`
	GID    int   `json:"gid"`
	Groups []int `json:"groups,omitempty"`
	// Root is an existing empty directory the jail's root is mounted on
	// (in the helper's own mount namespace: the host never sees it).
	Root string `json:"root"`
	// Binds are host paths made visible at the same path in the jail
	// (files or directories, read-only unless Writable). The VMM binary's
	// own tree (/usr and the host's /bin, /lib... links) is there too,
	// unless OwnTree.
	Binds []Bind `json:"binds"`
	// OwnTree: the VMM brings its own libraries, loader, modules and
	// firmware in a directory among Binds (a QEMU bundle), so nothing of
	// the host's tree is in the jail — not its programs, and not the
	// host's QEMU modules, which the bundle's QEMU would otherwise load
	// beside its own libraries when it enumerates device types.
	OwnTree bool `json:"ownTree,omitempty"`
	// Devices are extra device nodes bound in writable (e.g. /dev/kvm),
	// beside /dev/null, zero, full, random and urandom.
	Devices []string `json:"devices,omitempty"`
	// Cgroups are cgroup directories the VMM joins before it runs (one
	// per cgroup v1 hierarchy, or the one v2 directory).
	Cgroups []string `json:"cgroups,omitempty"`
	// OOMScoreAdj, when set, is written to the VMM's oom_score_adj.
	OOMScoreAdj *int `json:"oomScoreAdj,omitempty"`
}

// Bind is one host path in the jail.
type Bind struct {
	Path     string `json:"path"`
	Writable bool   `json:"writable,omitempty"`
}

func (s Spec) validate() error {
	var errs []error
	if s.UID <= 0 || s.GID <= 0 {
		errs = append(errs, fmt.Errorf("jail: uid %d, gid %d: both must be > 0", s.UID, s.GID))
	}
	for _, p := range append(append([]string{s.Path, s.Root}, s.Cgroups...), s.Devices...) {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("jail: %q is not an absolute path", p))
		}
	}
	for _, b := range s.Binds {
		if !filepath.IsAbs(b.Path) || filepath.Clean(b.Path) != b.Path || b.Path == "/" {
			errs = append(errs, fmt.Errorf("jail: bind %q: want a clean absolute path below /", b.Path))
		}
	}
	return errors.Join(errs...)
}

// Command is the helper process that jails and then becomes the VMM. The
// caller may set Stdin/Stdout/Stderr and ExtraFiles (they reach the VMM
// as fds 3, 4, ...) and wrap Start (e.g. in a network namespace).
func Command(s Spec) (*exec.Cmd, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("jail spec: %w", err)
	}
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{Argv0, string(b)}, Env: []string{}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

func init() {
	if filepath.Base(os.Args[0]) != Argv0 {
		return
	}
	var s Spec
	err := json.Unmarshal([]byte(strings.Join(os.Args[1:], "")), &s)
	if err == nil {
		err = s.validate()
	}
	if err == nil {
		err = become(s) // returns only on failure
	}
	fmt.Fprintf(os.Stderr, "sandlot jail: %v\n", err)
	os.Exit(126)
}
