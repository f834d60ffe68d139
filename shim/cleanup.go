package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandlot-dev/sandlot/shim/podnet"
)

// cleanupFile, in the app container's bundle, says what a VM left on the
// host, so containerd's `shim delete` can clean up after a shim that died.
const cleanupFile = "sandlot-vm.json"

type cleanupRecord struct {
	QEMUPID int `json:"qemuPID"`
	// QEMUStart is QEMU's start time (/proc/<pid>/stat field 22): a PID
	// reused by another process is never killed.
	QEMUStart string     `json:"qemuStart"`
	NetNS     string     `json:"netns"`
	Tap       string     `json:"tap"`
	Net       podnet.Pod `json:"net"`
	Paths     []string   `json:"paths"`
}

func (p *pod) cleanupRecord() cleanupRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := cleanupRecord{NetNS: p.netns, Tap: tapName, Net: p.net, Paths: []string{p.dir()}}
	if p.vm != nil {
		r.QEMUPID = p.vm.PID()
		r.QEMUStart = procStart(r.QEMUPID)
		r.Paths = append(r.Paths, p.vm.OwnedPaths()...)
	}
	return r
}

func writeCleanup(bundle string, r cleanupRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, cleanupFile), b, 0o600); err != nil {
		return fmt.Errorf("record the VM for cleanup: %w", err)
	}
	return nil
}

// cleanupBundle kills a VM its shim left behind and removes what it had
// on the host. A bundle without a record (the pause container, or a VM
// stopped cleanly) needs nothing.
func cleanupBundle(bundle string) error {
	b, err := os.ReadFile(filepath.Join(bundle, cleanupFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var r cleanupRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("cleanup record %s: %w", bundle, err)
	}
	errs := []error{killQEMU(r.QEMUPID, r.QEMUStart)}
	if r.NetNS != "" {
		errs = append(errs, podnet.Detach(r.NetNS, r.Net, r.Tap))
	}
	for _, p := range r.Paths {
		errs = append(errs, os.RemoveAll(p))
	}
	errs = append(errs, os.Remove(filepath.Join(bundle, cleanupFile)))
	return errors.Join(errs...)
}

func killQEMU(pid int, start string) error {
	if pid <= 0 || start == "" || procStart(pid) != start {
		return nil // gone already (Pdeathsig), or the PID is someone else's now
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill QEMU %d: %w", pid, err)
	}
	return nil
}

// procStart is a process's start time in clock ticks, "" if it is gone.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command may contain spaces: fields count from after its ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
