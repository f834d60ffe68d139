package nodeagent_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent"
)

// TestSandboxGauges: each running sandbox pod of the node has its VM's
// CPU time, memory and state; a pool pod not yet claimed and a pod of
// another node have none.
func TestSandboxGauges(t *testing.T) {
	a := startAgent(t, nil)
	a.pod("gauged", map[string]string{sandlotv1.LabelSandbox: "gauged"}, nil, corev1.PodRunning, "Running")
	a.pod("paused", map[string]string{sandlotv1.LabelSandbox: "paused"}, nil, corev1.PodRunning, "Paused")
	a.pod("pooled", map[string]string{sandlotv1.LabelSandbox: "", sandlotv1.LabelPool: "python"}, nil, corev1.PodRunning, "Paused")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(nodeagent.NewSandboxCollector(a.c, nodeagent.Node{Name: a.node, Dialer: a.shims}))
	want := `
# HELP sandlot_sandbox_running 1 while the sandbox's VM runs, 0 while it is paused or stopped.
# TYPE sandlot_sandbox_running gauge
sandlot_sandbox_running{namespace="NS",pod="gauged",sandbox="gauged"} 1
sandlot_sandbox_running{namespace="NS",pod="paused",sandbox="paused"} 0
# HELP sandlot_sandbox_cpu_seconds_total CPU time of the sandbox's VM (its QEMU) on this node.
# TYPE sandlot_sandbox_cpu_seconds_total counter
sandlot_sandbox_cpu_seconds_total{namespace="NS",pod="gauged",sandbox="gauged"} 1.5
sandlot_sandbox_cpu_seconds_total{namespace="NS",pod="paused",sandbox="paused"} 1.5
# HELP sandlot_sandbox_memory_pss_bytes Proportional set size of the sandbox's VM: shared snapshot pages divided among the VMs mapping them.
# TYPE sandlot_sandbox_memory_pss_bytes gauge
sandlot_sandbox_memory_pss_bytes{namespace="NS",pod="gauged",sandbox="gauged"} 4.194304e+07
sandlot_sandbox_memory_pss_bytes{namespace="NS",pod="paused",sandbox="paused"} 4.194304e+07
`
	want = strings.ReplaceAll(want, "NS", a.ns)
	a.eventually("the gauges of both sandbox pods", func() error {
		return testutil.GatherAndCompare(reg, strings.NewReader(want), "sandlot_sandbox_running",
			"sandlot_sandbox_cpu_seconds_total", "sandlot_sandbox_memory_pss_bytes")
	})
}
