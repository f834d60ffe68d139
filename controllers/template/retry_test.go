package template

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestBuildRetry: failures that can pass are retried after a wait that
// doubles per attempt up to the cap; the others are final.
func TestBuildRetry(t *testing.T) {
	for _, tc := range []struct {
		reason   string
		attempts int32
		wait     time.Duration
		retry    bool
	}{
		{sandlotv1.ReasonImageMissing, 1, 15 * time.Second, true},
		{sandlotv1.ReasonImageMissing, 2, 30 * time.Second, true},
		{sandlotv1.ReasonBuilderLost, 3, time.Minute, true},
		{sandlotv1.ReasonImageMissing, 6, 8 * time.Minute, true},
		{sandlotv1.ReasonImageMissing, 7, buildRetryMax, true},
		{sandlotv1.ReasonBuilderLost, 1000, buildRetryMax, true},
		{sandlotv1.ReasonImageMissing, 0, 15 * time.Second, true}, // an entry from before attempts were counted
		{sandlotv1.ReasonBuildFailed, 1, 0, false},
		{sandlotv1.ReasonProbeTimeout, 1, 0, false},
		{sandlotv1.ReasonInvalidImage, 1, 0, false},
		{"", 1, 0, false},
	} {
		wait, retry := buildRetry(tc.reason, tc.attempts)
		if wait != tc.wait || retry != tc.retry {
			t.Errorf("buildRetry(%s, %d) = %v, %t; want %v, %t", tc.reason, tc.attempts, wait, retry, tc.wait, tc.retry)
		}
	}
}

// TestDecideBuildRetry: a build failed on something that can pass is
// built again once its backoff passed and its builder is gone, with the
// attempt counted; a final failure stays.
func TestDecideBuildRetry(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	failed := func(reason string, attempts int32, retryIn time.Duration) *sandlotv1.BaseSnapshot {
		e := &sandlotv1.BaseSnapshot{Node: "n", Revision: "r2", Snapshot: "b", Phase: sandlotv1.BaseFailed, Reason: reason, Attempts: attempts}
		if retryIn != 0 {
			e.RetryAt = &metav1.Time{Time: now.Add(retryIn)}
		}
		return e
	}
	gone := &sandlotv1.Sandbox{Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxFailed, Reason: sandlotv1.ReasonPodLost}}
	cases := map[string]struct {
		w        builderWorld
		phase    sandlotv1.BasePhase
		attempts int32
		want     buildStep // action flags only
	}{
		"final: stays":                     {w: builderWorld{Entry: failed(sandlotv1.ReasonBuildFailed, 1, 0)}, phase: sandlotv1.BaseFailed, attempts: 1},
		"final, builder left: drop it":     {w: builderWorld{Entry: failed(sandlotv1.ReasonBuildFailed, 1, 0), Builder: gone}, phase: sandlotv1.BaseFailed, attempts: 1, want: buildStep{DeleteBuilder: true}},
		"backoff not passed: wait":         {w: builderWorld{Entry: failed(sandlotv1.ReasonImageMissing, 2, time.Minute)}, phase: sandlotv1.BaseFailed, attempts: 2},
		"backoff passed, builder going":    {w: builderWorld{Entry: failed(sandlotv1.ReasonImageMissing, 2, -time.Second), Builder: gone}, phase: sandlotv1.BaseFailed, attempts: 2, want: buildStep{DeleteBuilder: true}},
		"backoff passed: the next attempt": {w: builderWorld{Entry: failed(sandlotv1.ReasonBuilderLost, 2, -time.Second)}, phase: sandlotv1.BaseBuilding, attempts: 3, want: buildStep{CreateBuilder: true}},
		"backoff passed, the failed snapshot left: drop it first": {w: builderWorld{Entry: failed(sandlotv1.ReasonBuilderLost, 2, -time.Second),
			Snap: &sandlotv1.Snapshot{Status: sandlotv1.SnapshotStatus{DataStatus: sandlotv1.DataStatus{Phase: sandlotv1.DataFailed}}}},
			phase: sandlotv1.BaseFailed, attempts: 2, want: buildStep{DeleteSnapshot: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.w.Now = now
			got := decideBuild(tc.w, sandlotv1.BaseSnapshot{Node: "n", Revision: "r2", Snapshot: "b"})
			if got.Entry.Phase != tc.phase || got.Entry.Attempts != tc.attempts {
				t.Fatalf("entry %+v, want phase %s, attempt %d", got.Entry, tc.phase, tc.attempts)
			}
			if got.CreateBuilder != tc.want.CreateBuilder || got.DeleteBuilder != tc.want.DeleteBuilder ||
				got.DeleteSnapshot != tc.want.DeleteSnapshot || got.CreateSnapshot {
				t.Fatalf("step %+v, want %+v", got, tc.want)
			}
			if got.CreateBuilder && got.Entry.RetryAt != nil {
				t.Fatalf("a new attempt keeps retryAt %v", got.Entry.RetryAt)
			}
		})
	}
}

// TestBuildFailureKinds: what a failed attempt records — the reason,
// whether and when it is retried — for each way a builder fails.
func TestBuildFailureKinds(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-time.Minute))
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Image: "img",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}}}
	}
	ended := func(reason string) *sandlotv1.Sandbox {
		return &sandlotv1.Sandbox{Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxFailed, Reason: reason, Message: "m"}}
	}
	running := &sandlotv1.Sandbox{Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxRunning, StartedAt: &started}}
	evicted := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}}
	exited := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	for name, tc := range map[string]struct {
		w      builderWorld
		reason string
		retry  time.Duration // 0: final
	}{
		"image not on the node":  {builderWorld{Builder: running, Pod: waiting("ErrImageNeverPull")}, sandlotv1.ReasonImageMissing, buildRetryFirst},
		"pull failed":            {builderWorld{Builder: running, Pod: waiting("ErrImagePull")}, sandlotv1.ReasonImageMissing, buildRetryFirst},
		"invalid image name":     {builderWorld{Builder: running, Pod: waiting("InvalidImageName")}, sandlotv1.ReasonInvalidImage, 0},
		"builder pod evicted":    {builderWorld{Builder: ended(sandlotv1.ReasonPodFailed), Pod: evicted}, sandlotv1.ReasonBuilderLost, buildRetryFirst},
		"builder pod lost":       {builderWorld{Builder: ended(sandlotv1.ReasonPodLost)}, sandlotv1.ReasonBuilderLost, buildRetryFirst},
		"builder's node lost":    {builderWorld{Builder: ended(sandlotv1.ReasonNodeLost)}, sandlotv1.ReasonBuilderLost, buildRetryFirst},
		"builder process exited": {builderWorld{Builder: ended(sandlotv1.ReasonPodFailed), Pod: exited}, sandlotv1.ReasonBuildFailed, 0},
		"builder expired":        {builderWorld{Builder: ended(sandlotv1.ReasonExpired)}, sandlotv1.ReasonBuildFailed, 0},
		"a build step failed": {builderWorld{Builder: running, Pod: podReadyTrue(), Build: true, Built: &metav1.Condition{Type: sandlotv1.ConditionBuilt,
			Status: metav1.ConditionFalse, Reason: sandlotv1.ReasonBuildStepFailed, Message: "step 2 exited 1"}}, sandlotv1.ReasonBuildFailed, 0},
		"the probe never passed": {builderWorld{Builder: running, Pod: &corev1.Pod{}, Probe: time.Second}, sandlotv1.ReasonProbeTimeout, 0},
	} {
		t.Run(name, func(t *testing.T) {
			tc.w.Now = now
			got := decideBuild(tc.w, sandlotv1.BaseSnapshot{Node: "n", Revision: "r2", Snapshot: "b"}).Entry
			if got.Phase != sandlotv1.BaseFailed || got.Reason != tc.reason || got.Attempts != 1 {
				t.Fatalf("entry %+v, want Failed %s on attempt 1", got, tc.reason)
			}
			switch {
			case tc.retry == 0 && got.RetryAt != nil:
				t.Fatalf("a final failure retried at %v", got.RetryAt)
			case tc.retry != 0 && (got.RetryAt == nil || !got.RetryAt.Equal(&metav1.Time{Time: now.Add(tc.retry)})):
				t.Fatalf("retryAt %v, want %v", got.RetryAt, now.Add(tc.retry))
			case tc.retry != 0 && !strings.Contains(got.Message, "attempt 1; the next at"):
				t.Fatalf("message %q does not say when the next attempt is", got.Message)
			}
		})
	}
}

func podReadyTrue() *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
}

// TestRetryWait: the reconcile comes back at the earliest retry still to
// come, never in a loop for one whose time passed.
func TestRetryWait(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	got := retryWait(map[string]sandlotv1.BaseSnapshot{
		"a": {Phase: sandlotv1.BaseFailed, RetryAt: at(time.Minute)},
		"b": {Phase: sandlotv1.BaseFailed, RetryAt: at(20 * time.Second)},
		"c": {Phase: sandlotv1.BaseFailed, RetryAt: at(-time.Second)},
		"d": {Phase: sandlotv1.BaseFailed},
		"e": {Phase: sandlotv1.BaseReady},
	}, now)
	if got != 20*time.Second {
		t.Fatalf("retryWait = %v, want 20s", got)
	}
	if got := retryWait(map[string]sandlotv1.BaseSnapshot{"c": {Phase: sandlotv1.BaseFailed, RetryAt: at(-time.Second)}}, now); got != 0 {
		t.Fatalf("retryWait of a passed retry = %v, want 0 (an event wakes it)", got)
	}
}
