package metrics

import (
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// The failure counters' reason label is one of a known set, never free
// text: a reason outside it counts as reasonOther.
const reasonOther = "Other"

// createFailureReasons are the status reasons a Sandbox fails with.
var createFailureReasons = setOf(sandlotv1.ReasonPodFailed, sandlotv1.ReasonPodLost, sandlotv1.ReasonPodSucceeded,
	sandlotv1.ReasonSourceFailed, sandlotv1.ReasonInvalidSpec, sandlotv1.ReasonInvalidNetwork, sandlotv1.ReasonExpired,
	sandlotv1.ReasonClaimFailed, sandlotv1.ReasonPlacementFailed, sandlotv1.ReasonDataLost, sandlotv1.ReasonPausedStateDiscarded,
	sandlotv1.ReasonPauseFailed, sandlotv1.ReasonPodRejected, sandlotv1.ReasonPodCreateFailed, sandlotv1.ReasonNodeLost)

// buildFailureReasons are the reasons a base build fails with.
var buildFailureReasons = setOf(sandlotv1.ReasonImageMissing, sandlotv1.ReasonBuilderLost, sandlotv1.ReasonBuildFailed,
	sandlotv1.ReasonProbeTimeout, sandlotv1.ReasonInvalidImage)

func setOf(v ...string) map[string]bool {
	m := make(map[string]bool, len(v))
	for _, s := range v {
		m[s] = true
	}
	return m
}

// boundedReason is reason when known, else reasonOther.
func boundedReason(known map[string]bool, reason string) string {
	if known[reason] {
		return reason
	}
	return reasonOther
}

// createFailed says whether a status change is a sandbox failing before
// it ever ran (a failed create), and its source and reason.
func createFailed(old, cur *sandlotv1.Sandbox) (source, reason string, ok bool) {
	if old.Status.Phase == sandlotv1.SandboxFailed || cur.Status.Phase != sandlotv1.SandboxFailed || cur.Status.StartedAt != nil {
		return "", "", false
	}
	return startSource(cur), boundedReason(createFailureReasons, cur.Status.Reason), true
}

// ObserveCreateFailure counts a failed create once (a reconcile of a
// lagging cached copy sees the same change again).
func ObserveCreateFailure(old, cur *sandlotv1.Sandbox) {
	source, reason, ok := createFailed(old, cur)
	if ok && counted.mark(cur.UID, "failed") {
		createFailures.WithLabelValues(source, reason).Inc()
	}
}

// failedBuilds are the reasons of the build attempts that failed between
// two statuses of a template: an entry Failed now that was not, or was
// for an earlier attempt.
func failedBuilds(old, cur []sandlotv1.BaseSnapshot) []string {
	type attempt struct {
		node, revision string
		attempts       int32
	}
	was := map[attempt]bool{}
	for _, e := range old {
		if e.Phase == sandlotv1.BaseFailed {
			was[attempt{e.Node, e.Revision, e.Attempts}] = true
		}
	}
	var out []string
	for _, e := range cur {
		if e.Phase == sandlotv1.BaseFailed && !was[attempt{e.Node, e.Revision, e.Attempts}] {
			out = append(out, boundedReason(buildFailureReasons, e.Reason))
		}
	}
	return out
}

// ObserveBuildFailures counts the failed build attempts a status write
// recorded.
func ObserveBuildFailures(old, cur []sandlotv1.BaseSnapshot) {
	for _, reason := range failedBuilds(old, cur) {
		buildFailures.WithLabelValues(reason).Inc()
	}
}
