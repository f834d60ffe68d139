package v1alpha1

import (
	"slices"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of failures that have no other home.
const (
	// ReasonClaimFailed: a warm pool claim (or its activation) failed.
	ReasonClaimFailed = "ClaimFailed"
	// ReasonClaimedPodLost: a claimed warm pool pod went before the
	// sandbox ran in it; the sandbox is placed again.
	ReasonClaimedPodLost = "ClaimedPodLost"
	// ReasonNetworkFailed: the node agent could not apply the sandbox's
	// network rules on its VM's tap.
	ReasonNetworkFailed = "NetworkFailed"
	// ReasonPlacementFailed: placement could not read what it decides on.
	ReasonPlacementFailed = "PlacementFailed"
	// ReasonDataHandedOff: the data's node is gone; another node's agent
	// deletes its remote copy.
	ReasonDataHandedOff = "DataHandedOff"
	// ReasonDataLost: the data's node is gone and nothing remote existed.
	ReasonDataLost = "DataLost"
)

// failureReasons are the reasons an Event reports as a Warning.
var failureReasons = []string{
	ReasonNoEligibleNode, ReasonInsufficientCapacity, ReasonSourceNotFound, ReasonSourceFailed, ReasonTemplateNotAccepted,
	ReasonPodFailed, ReasonPodLost, ReasonPodRejected, ReasonPodCreateFailed, ReasonPauseFailed, ReasonPausedStateDiscarded,
	ReasonInvalidSpec, ReasonClaimFailed, ReasonClaimedPodLost, ReasonPlacementFailed, ReasonInvalidImage, ReasonImageMissing, ReasonProbeTimeout,
	ReasonBuildFailed, ReasonBuilderLost, ReasonRollbackRefused, ReasonRollbackFailed, ReasonExpired, ReasonDataLost, ReasonInvalidNetwork, ReasonTokenSecretLost, ReasonNodeLost, "Failed",
}

// Transition is one change of a condition, worded as its Event.
type Transition struct {
	Warning bool
	Reason  string
	Message string
}

// Transitions lists what changed from old to new conditions: a condition
// that appeared, or whose status or reason changed (not one whose message
// or generation alone moved), once per reason and message. Components
// turn them into Events, so `kubectl describe` tells the object's story.
func Transitions(old, cur []metav1.Condition) []Transition {
	var out []Transition
	for _, c := range cur {
		i := slices.IndexFunc(old, func(o metav1.Condition) bool { return o.Type == c.Type })
		if i >= 0 && old[i].Status == c.Status && old[i].Reason == c.Reason {
			continue
		}
		t := Transition{Warning: c.Status != metav1.ConditionTrue && slices.Contains(failureReasons, c.Reason),
			Reason: c.Reason, Message: c.Type + "=" + string(c.Status) + ": " + c.Message}
		if c.Message == "" {
			t.Message = c.Type + "=" + string(c.Status)
		}
		if !slices.ContainsFunc(out, func(o Transition) bool { return o.Reason == t.Reason }) {
			out = append(out, t)
		}
	}
	return out
}

// Conditioned is an object with status conditions (every sandlot kind).
// +kubebuilder:object:generate=false
type Conditioned interface {
	StatusConditions() []metav1.Condition
}

func (s *Sandbox) StatusConditions() []metav1.Condition       { return s.Status.Conditions }
func (s *Template) StatusConditions() []metav1.Condition      { return s.Status.Conditions }
func (s *Snapshot) StatusConditions() []metav1.Condition      { return s.Status.Conditions }
func (s *PausedSandbox) StatusConditions() []metav1.Condition { return s.Status.Conditions }

// Summarize folds one status write's transitions into one Event: the
// first warning's reason, else the last transition's (conditions end with
// the summary one, Ready), and every transition's message. One Event per
// write instead of per condition halves the apiserver writes a start costs.
func Summarize(ts []Transition) (Transition, bool) {
	if len(ts) == 0 {
		return Transition{}, false
	}
	head := ts[len(ts)-1]
	if i := slices.IndexFunc(ts, func(t Transition) bool { return t.Warning }); i >= 0 {
		head = ts[i]
	}
	msgs := make([]string, len(ts))
	for i, t := range ts {
		msgs[i] = t.Message
	}
	head.Message = strings.Join(msgs, "; ")
	return head, true
}

// MaxEventNote is the API server's limit on an Event's note: a longer one
// has the whole Event refused.
const MaxEventNote = 1024

// EventNote is s cut to MaxEventNote bytes on a rune boundary, "..." at
// the cut (a Template's message names its nodes: at a thousand nodes it
// is longer than an Event takes).
func EventNote(s string) string {
	if len(s) <= MaxEventNote {
		return s
	}
	n := MaxEventNote - len("...")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
