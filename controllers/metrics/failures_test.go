package metrics

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestCreateFailureCounted: a sandbox failing before it ever ran counts
// once, by source and reason; one failing after it ran, or a reason
// outside the known set, does not add a label value of its own.
func TestCreateFailureCounted(t *testing.T) {
	sbx := func(uid string, phase sandlotv1.SandboxPhase, reason string, ran bool) *sandlotv1.Sandbox {
		s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{UID: types.UID("create-failure-" + uid)},
			Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Snapshot: "s"}}}
		s.Status.Phase, s.Status.Reason = phase, reason
		if ran {
			s.Status.StartedAt = &metav1.Time{}
		}
		return s
	}
	lost := testutil.ToFloat64(createFailures.WithLabelValues(StartSnapshot, sandlotv1.ReasonPodLost))
	other := testutil.ToFloat64(createFailures.WithLabelValues(StartSnapshot, reasonOther))
	for _, step := range [][2]*sandlotv1.Sandbox{
		{sbx("a", sandlotv1.SandboxStarting, "", false), sbx("a", sandlotv1.SandboxFailed, sandlotv1.ReasonPodLost, false)},
		{sbx("a", sandlotv1.SandboxStarting, "", false), sbx("a", sandlotv1.SandboxFailed, sandlotv1.ReasonPodLost, false)}, // seen again
		{sbx("b", sandlotv1.SandboxRunning, "", true), sbx("b", sandlotv1.SandboxFailed, sandlotv1.ReasonPodLost, true)},    // ran: no create failure
		{sbx("c", sandlotv1.SandboxFailed, "", false), sbx("c", sandlotv1.SandboxFailed, sandlotv1.ReasonPodLost, false)},   // failed already
		{sbx("d", sandlotv1.SandboxPending, "", false), sbx("d", sandlotv1.SandboxFailed, "a message, not a reason", false)},
	} {
		ObserveCreateFailure(step[0], step[1])
	}
	if got := testutil.ToFloat64(createFailures.WithLabelValues(StartSnapshot, sandlotv1.ReasonPodLost)) - lost; got != 1 {
		t.Errorf("PodLost create failures moved by %v, want 1", got)
	}
	if got := testutil.ToFloat64(createFailures.WithLabelValues(StartSnapshot, reasonOther)) - other; got != 1 {
		t.Errorf("Other create failures moved by %v, want 1", got)
	}
}

// TestFailedBuilds: each failed attempt counts once, when its entry
// turns Failed; a retry that fails again counts again.
func TestFailedBuilds(t *testing.T) {
	e := func(node string, phase sandlotv1.BasePhase, reason string, attempts int32) sandlotv1.BaseSnapshot {
		return sandlotv1.BaseSnapshot{Node: node, Revision: "r", Phase: phase, Reason: reason, Attempts: attempts}
	}
	for _, tc := range []struct {
		name     string
		old, cur []sandlotv1.BaseSnapshot
		want     []string
	}{
		{"building to failed", []sandlotv1.BaseSnapshot{e("a", sandlotv1.BaseBuilding, "", 1)},
			[]sandlotv1.BaseSnapshot{e("a", sandlotv1.BaseFailed, sandlotv1.ReasonImageMissing, 1)}, []string{sandlotv1.ReasonImageMissing}},
		{"failed stays failed", []sandlotv1.BaseSnapshot{e("a", sandlotv1.BaseFailed, sandlotv1.ReasonImageMissing, 1)},
			[]sandlotv1.BaseSnapshot{e("a", sandlotv1.BaseFailed, sandlotv1.ReasonImageMissing, 1)}, nil},
		{"the retry failed too", []sandlotv1.BaseSnapshot{e("a", sandlotv1.BaseFailed, sandlotv1.ReasonImageMissing, 1)},
			[]sandlotv1.BaseSnapshot{e("a", sandlotv1.BaseFailed, sandlotv1.ReasonBuilderLost, 2)}, []string{sandlotv1.ReasonBuilderLost}},
		{"two nodes, an unknown reason", nil, []sandlotv1.BaseSnapshot{e("a", sandlotv1.BaseFailed, sandlotv1.ReasonBuildFailed, 1),
			e("b", sandlotv1.BaseFailed, "Weird", 1), e("c", sandlotv1.BaseReady, "", 1)}, []string{sandlotv1.ReasonBuildFailed, reasonOther}},
	} {
		if got := failedBuilds(tc.old, tc.cur); !slices.Equal(got, tc.want) {
			t.Errorf("%s: failedBuilds = %v, want %v", tc.name, got, tc.want)
		}
	}
	before := testutil.ToFloat64(buildFailures.WithLabelValues(sandlotv1.ReasonProbeTimeout))
	ObserveBuildFailures(nil, []sandlotv1.BaseSnapshot{e("a", sandlotv1.BaseFailed, sandlotv1.ReasonProbeTimeout, 1),
		e("b", sandlotv1.BaseFailed, sandlotv1.ReasonProbeTimeout, 1)})
	if got := testutil.ToFloat64(buildFailures.WithLabelValues(sandlotv1.ReasonProbeTimeout)) - before; got != 2 {
		t.Errorf("ProbeTimeout build failures moved by %v, want 2", got)
	}
}
