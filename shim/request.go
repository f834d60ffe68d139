package shim

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/sandlot-dev/sandlot/api/node"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// vmRequest is what a pod's annotations ask of its VM, decoded by the
// API's codec and sized with the node's defaults.
type vmRequest struct {
	VCPU, MemoryMiB, LayerMiB int
	Pool                      bool
	Restore                   *sandlotv1.RestoreRef
}

// parseVMRequest decodes and checks a pod's annotations: the codec's
// bounds, then the node's memory (memTotalMiB, 0 when unknown). Every
// refusal is an invalid-argument or resource-exhausted error naming the
// annotation.
func parseVMRequest(ann map[string]string, cfg node.Config, memTotalMiB int) (vmRequest, error) {
	a, err := sandlotv1.DecodeVMAnnotations(ann)
	if err != nil {
		return vmRequest{}, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	r := vmRequest{VCPU: orDefault(a.VCPU, cfg.DefaultVCPU), MemoryMiB: orDefault(a.MemoryMiB, cfg.DefaultMemoryMiB),
		LayerMiB: orDefault(a.WritableLayerMiB, cfg.LayerMiB), Pool: a.Pool != "", Restore: a.Restore}
	if memTotalMiB > 0 && r.MemoryMiB > memTotalMiB {
		return vmRequest{}, fmt.Errorf("%w: the VM wants %d MiB of memory (%s), the node has %d MiB",
			errdefs.ErrResourceExhausted, r.MemoryMiB, sandlotv1.AnnotationMemoryMiB, memTotalMiB)
	}
	return r, nil
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
