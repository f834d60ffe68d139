package data

import (
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// DataMessage is the message of a Snapshot's or PausedSandbox's Ready
// condition, for surfacing on the Sandbox.
func DataMessage(st sandlotv1.DataStatus) string {
	for _, c := range st.Conditions {
		if c.Type == sandlotv1.ConditionReady {
			return c.Message
		}
	}
	return "no reason given"
}
