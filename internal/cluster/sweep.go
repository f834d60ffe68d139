package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandlot-dev/sandlot/internal/crienv"
)

// Sweep undoes what a cluster in dir left behind when its owner died
// without cleaning up (SIGKILL, a crash): it kills the processes whose
// command line names dir, runs kube-proxy's cleanup, puts back the
// iptables rules saved at start, and removes mounts under dir, the
// cluster's bridges and cgroups, and its guest RAM directories.
func Sweep(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" {
		return fmt.Errorf("sweep: %q is not a cluster directory", dir)
	}
	id := shortHash(dir)
	errs := []error{killUnder(dir)}
	if cfg := filepath.Join(dir, "kube-proxy.yaml"); exists(cfg) {
		_ = run(filepath.Join(cacheDir(), "k8s", K8sVersion, "kube-proxy"), "--cleanup", "--config="+cfg)
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		if saved := filepath.Join(dir, "baseline", tool); exists(saved) {
			errs = append(errs, restoreIptables(tool, saved))
		}
	}
	errs = append(errs, crienv.UnmountUnder(dir), deleteLinks("slapi"+id))
	for i := 1; i <= 2; i++ {
		node := filepath.Join(dir, NodeName(i)) // nodeDirName
		errs = append(errs, deleteLinks(crienv.BridgeName(filepath.Join(node, "c"))),
			crienv.RemoveCgroup(fmt.Sprintf("/sandlot-%s-%s", id, NodeName(i))),
			crienv.RemoveCgroup(crienv.CgroupParentFor(filepath.Join(node, "c"))),
			os.RemoveAll(fmt.Sprintf("/dev/shm/sandlot-%s-%s", id, NodeName(i)))) // memoryDir
	}
	return errors.Join(errs...)
}

// killUnder SIGKILLs every process whose command line mentions dir.
func killUnder(dir string) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir+"/") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

func deleteLinks(name string) error {
	if !exists(filepath.Join("/sys/class/net", name)) {
		return nil
	}
	return run("ip", "link", "del", name)
}
