package crienv

// Stop and what it runs: removing pods, killing leftover shims and
// container processes (Processes), and undoing every host side effect.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

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
	return poll.Within(5*time.Second, "leftover processes gone", func() error {
		pids, err := e.Processes()
		if err != nil {
			return poll.Stop(err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return fmt.Errorf("processes still alive after SIGKILL: %v", pids)
	})
}
