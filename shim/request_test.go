package shim

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandlot-dev/sandlot/api/node"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestParseVMRequest(t *testing.T) {
	cfg := node.Config{}
	cfg.Defaults()
	for _, tc := range []struct {
		name   string
		ann    map[string]string
		limits containerLimits
		memMiB int
		want   vmRequest
		errIs  error
		errHas string
	}{
		{name: "defaults", ann: map[string]string{}, memMiB: 4096, want: vmRequest{VCPU: 1, MemoryMiB: 512, LayerMiB: 1024}},
		{name: "sized", memMiB: 4096, ann: map[string]string{sandlotv1.AnnotationVCPU: "2", sandlotv1.AnnotationMemoryMiB: "1024",
			sandlotv1.AnnotationWritableLayerMiB: "64", sandlotv1.AnnotationPool: "python"},
			want: vmRequest{VCPU: 2, MemoryMiB: 1024, LayerMiB: 64, Pool: true}},
		{name: "meminfo unknown", ann: map[string]string{sandlotv1.AnnotationMemoryMiB: "8192"}, memMiB: 0,
			want: vmRequest{VCPU: 1, MemoryMiB: 8192, LayerMiB: 1024}},
		{name: "more memory than the node", ann: map[string]string{sandlotv1.AnnotationMemoryMiB: "8192"}, memMiB: 4096,
			errIs: errdefs.ErrResourceExhausted, errHas: "the node has 4096 MiB"},
		{name: "bad vcpu", ann: map[string]string{sandlotv1.AnnotationVCPU: "many"}, memMiB: 4096,
			errIs: errdefs.ErrInvalidArgument, errHas: sandlotv1.AnnotationVCPU},
		{name: "restore of a path with no UID", memMiB: 4096, ann: map[string]string{sandlotv1.AnnotationBoot: sandlotv1.BootRestore,
			sandlotv1.AnnotationRestoreKind: "Snapshot", sandlotv1.AnnotationRestoreLocation: "/etc"},
			errIs: errdefs.ErrInvalidArgument, errHas: sandlotv1.AnnotationRestoreUID},
		{name: "plain pod sized by its limits", ann: map[string]string{}, limits: containerLimits{VCPU: 2, MemoryMiB: 300}, memMiB: 4096,
			want: vmRequest{VCPU: 2, MemoryMiB: 300, LayerMiB: 1024}},
		{name: "annotations over limits", ann: map[string]string{sandlotv1.AnnotationMemoryMiB: "256"},
			limits: containerLimits{MemoryMiB: 300}, memMiB: 4096, want: vmRequest{VCPU: 1, MemoryMiB: 256, LayerMiB: 1024}},
		{name: "a limit too small for a VM", ann: map[string]string{}, limits: containerLimits{MemoryMiB: 32}, memMiB: 4096,
			errIs: errdefs.ErrInvalidArgument, errHas: "memory limit is 32 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVMRequest(tc.ann, tc.limits, cfg, tc.memMiB)
			if tc.errIs != nil {
				if !errors.Is(err, tc.errIs) || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v: want %v naming %q", err, tc.errIs, tc.errHas)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseMemTotal(t *testing.T) {
	for in, want := range map[string]int{
		"MemTotal:       24567892 kB\nMemFree: 1 kB\n": 23992,
		"MemFree: 1 kB\n": 0,
		"":                0,
	} {
		if got := parseMemTotalMiB(in); got != want {
			t.Errorf("parseMemTotalMiB(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestLimitsOf(t *testing.T) {
	mem, quota, period := int64(300<<20), int64(150000), uint64(100000)
	spec := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &mem}, CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}}}}
	if got := limitsOf(spec); got != (containerLimits{VCPU: 2, MemoryMiB: 300}) {
		t.Fatalf("limits %+v: want 2 vCPU (1.5 rounded up), 300 MiB", got)
	}
	if got := limitsOf(&specs.Spec{}); got != (containerLimits{}) {
		t.Fatalf("no limits: %+v", got)
	}
}
