package nodeagent

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// TestObserveDataFailure: data turning Failed counts once by its
// reason, an upload turning Failed once; a reason outside the known set
// counts as Other, and a status that stays Failed adds nothing.
func TestObserveDataFailure(t *testing.T) {
	const kind = "FailureKind"
	failed := func(reason string) sandlotv1.DataStatus {
		return sandlotv1.DataStatus{Phase: sandlotv1.DataFailed, Conditions: []metav1.Condition{{Type: sandlotv1.ConditionReady,
			Status: metav1.ConditionFalse, Reason: reason}}}
	}
	creating := sandlotv1.DataStatus{Phase: sandlotv1.DataCreating}
	uploading := sandlotv1.DataStatus{Phase: sandlotv1.DataReady, RemoteStatus: sandlotv1.RemoteInProgress}
	lost := sandlotv1.DataStatus{Phase: sandlotv1.DataReady, RemoteStatus: sandlotv1.RemoteFailed, Conditions: []metav1.Condition{
		{Type: sandlotv1.ConditionRemoteReady, Status: metav1.ConditionFalse, Reason: string(sandlotv1.RemoteFailed)}}}
	for _, step := range [][2]sandlotv1.DataStatus{{creating, failed("ShimUnreachable")}, {failed("ShimUnreachable"), failed("ShimUnreachable")},
		{creating, failed("something said in words")}, {uploading, lost}, {lost, lost}} {
		observeData(kind, metav1.Now(), step[0], step[1])
	}
	for _, tc := range []struct {
		name string
		got  float64
	}{
		{"ShimUnreachable", testutil.ToFloat64(snapshotFailures.WithLabelValues(kind, "ShimUnreachable"))},
		{"Other", testutil.ToFloat64(snapshotFailures.WithLabelValues(kind, reasonOther))},
		{"upload Failed", testutil.ToFloat64(uploadFailures.WithLabelValues(kind, string(sandlotv1.RemoteFailed)))},
	} {
		if tc.got != 1 {
			t.Errorf("%s: %v, want 1", tc.name, tc.got)
		}
	}
}

// TestObserveStageError: a restore the agent could not stage counts by
// reason; data not ready yet is a wait, not a failure.
func TestObserveStageError(t *testing.T) {
	value := func(reason string) float64 { return testutil.ToFloat64(restoreFailures.WithLabelValues(reason)) }
	before := map[string]float64{}
	for _, r := range []string{restoreNotFound, restoreError, stageapi.ReasonIntegrityCheckFailed, reasonOther} {
		before[r] = value(r)
	}
	for _, err := range []error{nil, fmt.Errorf("open: %w", store.ErrNotFound), fmt.Errorf("open: %w", store.ErrNotReady),
		fmt.Errorf("read: %w", store.ErrIntegrity), errors.New("disk on fire")} {
		observeStageError(err)
	}
	for r, want := range map[string]float64{restoreNotFound: 1, restoreError: 1, stageapi.ReasonIntegrityCheckFailed: 1, reasonOther: 0} {
		if got := value(r) - before[r]; got != want {
			t.Errorf("%s moved by %v, want %v", r, got, want)
		}
	}
}
