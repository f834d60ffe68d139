package shim

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandlot-dev/sandlot/api/node"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// vmRequest is what a pod's annotations ask of its VM, decoded by the
// API's codec and sized with the node's defaults.
type vmRequest struct {
	VCPU, MemoryMiB, LayerMiB int
	Pool                      bool
	Slot                      bool // a start slot: no VM until a claim
	Restore                   *sandlotv1.RestoreRef
	Network                   *sandlotv1.SandboxNetwork
	Volumes                   []sandlotv1.PodVolume
}

// parseVMRequest decodes and checks a pod's annotations: the codec's
// bounds, then the node's memory (memTotalMiB, 0 when unknown). Every
// refusal is an invalid-argument or resource-exhausted error naming the
// annotation.
//
// Without the annotations (a plain pod of the runtime class) the VM is
// sized from the container's limits, as Kata does: its memory limit is the
// VM's memory and its CPU limit, rounded up, the vCPUs; the node's
// defaults fill in what the container does not limit.
func parseVMRequest(ann map[string]string, limits containerLimits, cfg node.Config, memTotalMiB int) (vmRequest, error) {
	a, err := sandlotv1.DecodeVMAnnotations(ann)
	if err != nil {
		return vmRequest{}, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := limits.check(); err != nil {
		return vmRequest{}, err
	}
	r := vmRequest{VCPU: orDefault(a.VCPU, orDefault(limits.VCPU, cfg.DefaultVCPU)),
		MemoryMiB: orDefault(a.MemoryMiB, orDefault(limits.MemoryMiB, cfg.DefaultMemoryMiB)),
		LayerMiB:  orDefault(a.WritableLayerMiB, cfg.LayerMiB), Pool: a.Pool != "", Slot: a.Slot, Restore: a.Restore, Network: a.Network,
		Volumes: a.Volumes}
	if memTotalMiB > 0 && r.MemoryMiB > memTotalMiB {
		return vmRequest{}, fmt.Errorf("%w: the VM wants %d MiB of memory (%s), the node has %d MiB",
			errdefs.ErrResourceExhausted, r.MemoryMiB, sandlotv1.AnnotationMemoryMiB, memTotalMiB)
	}
	return r, nil
}

// containerLimits are the app container's CPU and memory limits (0: none).
type containerLimits struct{ VCPU, MemoryMiB int32 }

// limitsOf reads them from the container's OCI spec.
func limitsOf(spec *specs.Spec) containerLimits {
	var l containerLimits
	if spec.Linux == nil || spec.Linux.Resources == nil {
		return l
	}
	res := spec.Linux.Resources
	if m := res.Memory; m != nil && m.Limit != nil && *m.Limit > 0 {
		l.MemoryMiB = int32(min(*m.Limit>>20, sandlotv1.MaxMemoryMiB+1))
	}
	if c := res.CPU; c != nil && c.Quota != nil && *c.Quota > 0 && c.Period != nil && *c.Period > 0 {
		l.VCPU = int32(min((*c.Quota+int64(*c.Period)-1)/int64(*c.Period), sandlotv1.MaxVCPU+1))
	}
	return l
}

// check refuses limits no VM can honour: a VM below the minimum would not
// fit the pod's memory limit.
func (l containerLimits) check() error {
	if l.MemoryMiB != 0 && (l.MemoryMiB < sandlotv1.MinMemoryMiB || l.MemoryMiB > sandlotv1.MaxMemoryMiB) {
		return fmt.Errorf("%w: the container's memory limit is %d MiB: a VM needs %d to %d MiB",
			errdefs.ErrInvalidArgument, l.MemoryMiB, sandlotv1.MinMemoryMiB, sandlotv1.MaxMemoryMiB)
	}
	if l.VCPU > sandlotv1.MaxVCPU {
		return fmt.Errorf("%w: the container's CPU limit asks for %d vCPUs: at most %d",
			errdefs.ErrInvalidArgument, l.VCPU, sandlotv1.MaxVCPU)
	}
	return nil
}

func orDefault(v int32, def int) int {
	if v == 0 {
		return def
	}
	return int(v)
}

// memTotalMiB is the node's memory from /proc/meminfo (0 when unreadable).
func memTotalMiB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	return parseMemTotalMiB(string(b))
}

func parseMemTotalMiB(meminfo string) int {
	for _, line := range strings.Split(meminfo, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return 0
}
