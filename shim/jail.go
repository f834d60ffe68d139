package shim

import (
	"fmt"

	"github.com/sandlot-dev/sandlot/vm"
)

// prepareJail claims the pod's VM uid and makes its cgroup, once per pod
// (a restore in place reuses both).
func (p *pod) prepareJail() error {
	if p.vmUID == nil {
		c, err := claimUID(p.cfg.Root, p.cfg.VMUIDs, p.uid)
		if err != nil {
			return err
		}
		p.vmUID = c
	}
	if p.cgroups == nil && p.cgroupsPath != "" {
		dirs, err := cgroupDirs(p.cgroupsPath)
		if err != nil {
			return fmt.Errorf("the VM's cgroup: %w", err)
		}
		p.cgroups = dirs
		if err := makeCgroups(dirs); err != nil {
			return err
		}
	}
	return nil
}

// jail is how the pod's QEMU is confined.
func (p *pod) jail() *vm.Jail {
	if p.vmUID == nil {
		return nil
	}
	return &vm.Jail{UID: p.vmUID.uid, GID: p.vmUID.uid, SharedGID: p.cfg.VMMGroup,
		Cgroups: p.cgroups, OOMScoreAdj: p.oomScoreAdj}
}

// releaseJail removes the cgroup and frees the uid, after the VM stopped.
func (p *pod) releaseJail() error {
	err := removeCgroups(p.cgroups)
	p.cgroups = nil
	p.vmUID.release()
	p.vmUID = nil
	return err
}

// vmOOMKilled reports whether the pod's VM was killed for memory: its
// QEMU went over the pod's limit.
func (p *pod) vmOOMKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return oomKilled(p.cgroups)
}
