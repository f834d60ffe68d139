package nodeagent

import (
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// reasonOther counts a failure whose reason is outside a counter's set.
const reasonOther = "Other"

// dataFailureReasons are the reasons setFailed gives data.
var dataFailureReasons = map[string]bool{"AgentRestarted": true, "SandboxNotRunning": true, "ShimUnreachable": true,
	"SnapshotFailed": true, "StoreFailed": true}

// uploadFailureReasons are the RemoteReady reasons of a failed upload
// (the store says Failed and why in words, which stay in the message).
var uploadFailureReasons = map[string]bool{string(sandlotv1.RemoteFailed): true}

// Reasons of a restore the agent did not stage.
const (
	restoreNotFound = "NotFound"
	restoreRefused  = "Refused" // the stage request is not the pod's to make
	restoreError    = "Error"
)

func bounded(known map[string]bool, reason string) string {
	if known[reason] {
		return reason
	}
	return reasonOther
}

// observeDataFailure counts data that failed, and data whose upload
// failed, at the status change that says so.
func observeDataFailure(kind string, old, cur sandlotv1.DataStatus) {
	if old.Phase != sandlotv1.DataFailed && cur.Phase == sandlotv1.DataFailed {
		reason := ""
		if c := meta.FindStatusCondition(cur.Conditions, sandlotv1.ConditionReady); c != nil {
			reason = c.Reason
		}
		snapshotFailures.WithLabelValues(kind, bounded(dataFailureReasons, reason)).Inc()
	}
	if old.RemoteStatus != sandlotv1.RemoteFailed && cur.RemoteStatus == sandlotv1.RemoteFailed {
		reason := string(sandlotv1.RemoteFailed)
		if c := meta.FindStatusCondition(cur.Conditions, sandlotv1.ConditionRemoteReady); c != nil {
			reason = c.Reason
		}
		uploadFailures.WithLabelValues(kind, bounded(uploadFailureReasons, reason)).Inc()
	}
}

// observeStageError counts a restore whose data could not be opened
// (nil: none). Data not ready yet is a wait the shim asks again about,
// not a failure.
func observeStageError(err error) {
	switch {
	case err == nil, errors.Is(err, store.ErrNotReady), errors.Is(err, store.ErrNotCommitted):
		return
	case errors.Is(err, store.ErrNotFound):
		observeRestoreFailure(restoreNotFound)
	case refusal(err) != "":
		observeRestoreFailure(refusal(err))
	default:
		observeRestoreFailure(restoreError)
	}
}

// restoreFailureReasons bounds the restore counter's reason label.
var restoreFailureReasons = map[string]bool{restoreNotFound: true, restoreRefused: true, restoreError: true,
	stageapi.ReasonIntegrityCheckFailed: true, stageapi.ReasonManifestRejected: true}

func observeRestoreFailure(reason string) {
	restoreFailures.WithLabelValues(bounded(restoreFailureReasons, reason)).Inc()
}
