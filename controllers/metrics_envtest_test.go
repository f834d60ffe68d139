package controllers_test

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestStateGauges: at a scrape the controller reports its runtime node's
// capacity, what sandlot's pods request there (a running sandbox's VM),
// the node's fingerprint, and the warm pool a template wants.
func TestStateGauges(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("gauge-node", "8", "16Gi", map[string]string{sandlotv1.LabelFingerprint: "fp-gauges"})
	h.template("gauged", 512)
	h.editTemplate("gauged", func(s *sandlotv1.TemplateSpec) { s.WarmPool = 3 })
	h.running(newSandbox("measured", sandlotv1.SandboxSource{Template: "gauged"}), "10.97.0.1")
	h.eventually(10*time.Second, "the state gauges", func() error {
		for _, c := range []struct {
			name   string
			labels map[string]string
			ok     func(float64) bool
			want   string
		}{
			{"sandlot_node_capacity", map[string]string{"node": "gauge-node", "resource": "cpu"}, eq(8), "8 cores"},
			{"sandlot_node_capacity", map[string]string{"node": "gauge-node", "resource": "memory"}, eq(16 << 30), "16 GiB"},
			{"sandlot_node_requested", map[string]string{"node": "gauge-node", "resource": "memory"},
				func(v float64) bool { return v >= 512<<20 && v < 16<<30 }, "the VM's 512 MiB and at most the node's"},
			{"sandlot_node_requested", map[string]string{"node": "gauge-node", "resource": "cpu"},
				func(v float64) bool { return v >= 1 && v <= 8 }, "its vCPU, at most the node's"},
			{"sandlot_node_info", map[string]string{"node": "gauge-node", "fingerprint": "fp-gauges", "ready": "true"}, eq(1), "1"},
			{"sandlot_pool_target", map[string]string{"namespace": h.ns, "template": "gauged"}, eq(3), "spec.warmPool 3"},
		} {
			v, found, err := gauge(c.name, c.labels)
			if err != nil || !found || !c.ok(v) {
				return fmt.Errorf("%s%v = %v (found %t, %v), want %s", c.name, c.labels, v, found, err, c.want)
			}
		}
		return nil
	})
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// gauge is the value of the series of name whose labels include labels.
func gauge(name string, labels map[string]string) (float64, bool, error) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				return m.GetGauge().GetValue(), true, nil
			}
		}
	}
	return 0, false, nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}
