package shim

import (
	"context"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sandlot-dev/sandlot/vm"
)

// metrics reports the VM's host use in the cgroup v1 shape CRI decodes
// for ContainerStats: QEMU's PSS as memory usage (the clones' shared
// snapshot pages split among them) and its CPU time.
func (p *pod) metrics() (*anypb.Any, error) {
	var st vm.Stats
	err := p.withVM(func(v machine) (err error) {
		st, err = v.Stats()
		return err
	})
	if err != nil {
		return nil, err
	}
	m := &v1.Metrics{
		CPU:    &v1.CPUStat{Usage: &v1.CPUUsage{Total: uint64(st.CPU)}},
		Memory: &v1.MemoryStat{Usage: &v1.MemoryEntry{Usage: uint64(st.PSSBytes)}, RSS: uint64(st.PrivateBytes)},
	}
	return typeurl.MarshalAnyToProto(m)
}

func logf(ctx context.Context, format string, args ...any) {
	log.G(ctx).Infof(format, args...)
}
