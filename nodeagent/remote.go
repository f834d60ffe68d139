package nodeagent

import (
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// remoteStatus is the API's remoteStatus for a store's remote state: the
// store knows nothing of the API, the agent maps one onto the other here.
// A key queued behind other uploads (Pending) is under way for the user:
// InProgress. A state this agent does not know is InProgress too — never
// Ready, never final — so the agent keeps following it.
func remoteStatus(r store.RemoteState) sandlotv1.RemoteStatus {
	switch r {
	case store.RemotePending, store.RemoteInProgress:
		return sandlotv1.RemoteInProgress
	case store.RemoteReady:
		return sandlotv1.RemoteReady
	case store.RemoteFailed:
		return sandlotv1.RemoteFailed
	case store.RemoteNotApplicable:
		return sandlotv1.RemoteNotApplicable
	}
	return sandlotv1.RemoteInProgress
}
