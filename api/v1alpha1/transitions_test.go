package v1alpha1

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTransitions(t *testing.T) {
	cond := func(typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg}
	}
	pending := cond(ConditionScheduled, metav1.ConditionFalse, ReasonInsufficientCapacity, "no room")
	readyPending := cond(ConditionReady, metav1.ConditionFalse, ReasonInsufficientCapacity, "no room")
	placed := cond(ConditionScheduled, metav1.ConditionTrue, ReasonPlaced, "on n1")
	for _, tc := range []struct {
		name     string
		old, cur []metav1.Condition
		want     []Transition
	}{
		{"nothing changed", []metav1.Condition{placed}, []metav1.Condition{placed}, nil},
		{"only the message moved", []metav1.Condition{pending},
			[]metav1.Condition{cond(ConditionScheduled, metav1.ConditionFalse, ReasonInsufficientCapacity, "still none")}, nil},
		{"a failure is a warning, once per reason", nil, []metav1.Condition{pending, readyPending},
			[]Transition{{Warning: true, Reason: ReasonInsufficientCapacity, Message: "Scheduled=False: no room"}}},
		{"placed", []metav1.Condition{pending}, []metav1.Condition{placed},
			[]Transition{{Reason: ReasonPlaced, Message: "Scheduled=True: on n1"}}},
		{"a progress reason is normal", nil, []metav1.Condition{cond(ConditionReady, metav1.ConditionFalse, ReasonPodPending, "")},
			[]Transition{{Reason: ReasonPodPending, Message: "Ready=False"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transitions(tc.old, tc.cur); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	placed := Transition{Reason: ReasonPlaced, Message: "Scheduled=True: on n1"}
	pending := Transition{Reason: ReasonPodPending, Message: "Ready=False"}
	failed := Transition{Warning: true, Reason: ReasonPodFailed, Message: "Ready=False: exit 1"}
	for _, tc := range []struct {
		name string
		in   []Transition
		want Transition
		ok   bool
	}{
		{"none: no Event", nil, Transition{}, false},
		{"one", []Transition{placed}, placed, true},
		{"the last one's reason, every message", []Transition{placed, pending},
			Transition{Reason: ReasonPodPending, Message: "Scheduled=True: on n1; Ready=False"}, true},
		{"a warning heads", []Transition{placed, failed, pending},
			Transition{Warning: true, Reason: ReasonPodFailed, Message: "Scheduled=True: on n1; Ready=False: exit 1; Ready=False"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Summarize(tc.in)
			if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v %v, want %+v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestEventNote: a note over the API server's limit is cut on a rune
// boundary with "..." (else the whole Event is refused); shorter ones are
// as they were.
func TestEventNote(t *testing.T) {
	long := strings.Repeat("é", MaxEventNote) // 2 bytes each: a cut inside one must back off
	for _, s := range []string{"", "short", strings.Repeat("x", MaxEventNote), strings.Repeat("x", MaxEventNote+1), long} {
		got := EventNote(s)
		switch {
		case len(s) <= MaxEventNote && got != s:
			t.Errorf("EventNote of %d bytes changed it", len(s))
		case len(s) > MaxEventNote && (len(got) > MaxEventNote || !strings.HasSuffix(got, "...") || !utf8.ValidString(got)):
			t.Errorf("EventNote of %d bytes: %d bytes, valid UTF-8 %v, ends %q", len(s), len(got), utf8.ValidString(got), got[len(got)-4:])
		}
	}
}
