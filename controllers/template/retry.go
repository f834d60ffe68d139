package template

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// A base build that failed on something that can pass — the image not
// there yet (imported later, a pull that failed once), the builder's pod
// evicted or its node lost — is built again after a backoff; one that
// cannot (a build step exiting non-zero, a probe that never passed, an
// invalid image name) stays Failed until the spec changes. The node's
// entry counts the attempts and says when the next one starts.

// Build retry backoff: the wait after the first failed attempt, doubled
// after each further one, up to buildRetryMax.
const (
	buildRetryFirst = 15 * time.Second
	buildRetryMax   = 10 * time.Minute
)

// transientBuildReasons are the failures a later attempt may not meet.
var transientBuildReasons = map[string]bool{sandlotv1.ReasonImageMissing: true, sandlotv1.ReasonBuilderLost: true}

// buildRetry says whether a build that failed for reason on its attempts-th
// attempt is tried again, and after how long.
func buildRetry(reason string, attempts int32) (time.Duration, bool) {
	if !transientBuildReasons[reason] {
		return 0, false
	}
	wait := buildRetryFirst
	for i := int32(1); i < attempts && wait < buildRetryMax; i++ {
		wait *= 2
	}
	return min(wait, buildRetryMax), true
}

// attemptOf is the attempt a node's entry in progress counts: its own,
// or the first (an entry from before attempts were counted).
func attemptOf(e *sandlotv1.BaseSnapshot) int32 {
	if e == nil {
		return 1
	}
	return max(e.Attempts, 1)
}

// failedEntry is entry Failed for reason, with the time of its next
// attempt when the failure can pass.
func failedEntry(entry sandlotv1.BaseSnapshot, reason, msg string, now time.Time) sandlotv1.BaseSnapshot {
	entry.Phase, entry.Reason, entry.Message, entry.RetryAt = sandlotv1.BaseFailed, reason, msg, nil
	if wait, ok := buildRetry(reason, entry.Attempts); ok {
		at := metav1.NewTime(now.Add(wait).Truncate(time.Second))
		entry.RetryAt = &at
		entry.Message = fmt.Sprintf("%s (attempt %d; the next at %s)", msg, entry.Attempts, at.UTC().Format(time.RFC3339))
	}
	return entry
}

// decideRetry is the step of a node whose build failed: none when the
// failure is final or its backoff has not passed, the deletion of a
// builder still there, else the next attempt's builder.
func decideRetry(w builderWorld) buildStep {
	e := *w.Entry
	switch {
	case w.Builder != nil:
		return buildStep{Entry: e, DeleteBuilder: true}
	case e.RetryAt == nil || w.Now.Before(e.RetryAt.Time):
		return buildStep{Entry: e}
	case w.Snap != nil:
		// The failed attempt's snapshot first: the next attempt's would
		// find it under the same name and fail with it.
		return buildStep{Entry: e, DeleteSnapshot: w.Snap.DeletionTimestamp == nil}
	}
	e.Attempts++
	e.Phase, e.Reason, e.RetryAt = sandlotv1.BaseBuilding, sandlotv1.ReasonBuilding, nil
	e.Message = fmt.Sprintf("booting the image (attempt %d)", e.Attempts)
	return buildStep{CreateBuilder: true, Entry: e}
}

// sourceGone: a builder's snapshot failed because the builder went (was
// deleted or ended) before the node agent took it: nothing in the image
// or the build, so another attempt may pass.
func sourceGone(snap *sandlotv1.Snapshot) bool {
	for _, c := range snap.Status.Conditions {
		if c.Status == metav1.ConditionFalse && (c.Reason == sandlotv1.ReasonSourceFailed || c.Reason == sandlotv1.ReasonSourceNotFound) {
			return true
		}
	}
	return false
}

// evictions are a failed pod's reasons for going that say nothing of its
// image or build: the kubelet or the node took it.
var evictions = map[string]bool{"Evicted": true, "Shutdown": true, "NodeShutdown": true, "Terminated": true,
	"NodeLost": true, "Preempting": true}

// builderFailure is the reason and message of a builder that ended:
// BuilderLost when its pod was taken from it (deleted, evicted, its
// node gone), else BuildFailed.
func builderFailure(b *sandlotv1.Sandbox, pod *corev1.Pod) (string, string) {
	msg := fmt.Sprintf("the builder sandbox %s: %s", b.Status.Reason, b.Status.Message)
	lost := b.Status.Reason == sandlotv1.ReasonPodLost || b.Status.Reason == sandlotv1.ReasonNodeLost ||
		(b.Status.Reason == sandlotv1.ReasonPodFailed && pod != nil && evictions[pod.Status.Reason])
	if lost {
		return sandlotv1.ReasonBuilderLost, msg
	}
	return sandlotv1.ReasonBuildFailed, msg
}

// retryWait is how long until the earliest retry of entries still to
// come (0: none). One whose time passed waits for an event, not a poll:
// its builder's deletion, or its node becoming eligible again.
func retryWait(entries map[string]sandlotv1.BaseSnapshot, now time.Time) time.Duration {
	var wait time.Duration
	for _, e := range entries {
		if e.Phase != sandlotv1.BaseFailed || e.RetryAt == nil || !e.RetryAt.After(now) {
			continue
		}
		d := e.RetryAt.Sub(now)
		if wait == 0 || d < wait {
			wait = d
		}
	}
	return wait
}
