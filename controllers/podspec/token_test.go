package podspec

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/event"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestDecideToken: a token is drawn only when no pod could hold the old
// one; a deleting Secret still counts; an older controller's Secret is
// held; another's is left alone.
func TestDecideToken(t *testing.T) {
	cases := map[string]struct {
		w    tokenWorld
		want tokenAction
	}{
		"none, no pod (a start; paused; placed again)": {tokenWorld{}, tokenDraw},
		"gone under a pod":                                  {tokenWorld{Pod: true}, tokenLost},
		"ours, held":                                        {tokenWorld{Found: true, Ours: true, Held: true}, tokenKeep},
		"ours, held, under a pod":                           {tokenWorld{Found: true, Ours: true, Held: true, Pod: true}, tokenKeep},
		"ours, an older controller's, unheld":               {tokenWorld{Found: true, Ours: true}, tokenHold},
		"ours, held, its deletion under way":                {tokenWorld{Found: true, Ours: true, Held: true, Deleting: true}, tokenReportHeld},
		"ours, unheld, its deletion under way":              {tokenWorld{Found: true, Ours: true, Deleting: true, Pod: true}, tokenKeep},
		"another's of that name":                            {tokenWorld{Found: true}, tokenKeep},
		"another's of that name, being deleted":             {tokenWorld{Found: true, Deleting: true}, tokenKeep},
		"another's of that name, our finalizer set by hand": {tokenWorld{Found: true, Held: true, Deleting: true}, tokenKeep},
	}
	for name, tc := range cases {
		if got := decideToken(tc.w); got != tc.want {
			t.Errorf("%s: decideToken(%+v) = %d, want %d", name, tc.w, got, tc.want)
		}
	}
}

// TestMarkTokenLost: a lost token shows on Ready while the sandbox has a
// pod and has not ended, and a Ready that said so already keeps its
// transition time (no status write at every reconcile).
func TestMarkTokenLost(t *testing.T) {
	then := metav1.NewTime(time.Unix(1700000000, 0))
	lostBefore := &metav1.Condition{Type: sandlotv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: sandlotv1.ReasonTokenSecretLost, LastTransitionTime: then}
	runningBefore := &metav1.Condition{Type: sandlotv1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: sandlotv1.ReasonPodRunning, LastTransitionTime: then}
	cases := map[string]struct {
		phase    sandlotv1.SandboxPhase
		pod      string
		prev     *metav1.Condition
		reason   string // Ready's afterwards
		keepTime bool
	}{
		"running, just lost":      {sandlotv1.SandboxRunning, "p", runningBefore, sandlotv1.ReasonTokenSecretLost, false},
		"running, lost before":    {sandlotv1.SandboxRunning, "p", lostBefore, sandlotv1.ReasonTokenSecretLost, true},
		"starting":                {sandlotv1.SandboxStarting, "p", nil, sandlotv1.ReasonTokenSecretLost, false},
		"pausing":                 {sandlotv1.SandboxPausing, "p", lostBefore, sandlotv1.ReasonTokenSecretLost, true},
		"paused: the pod is gone": {sandlotv1.SandboxPaused, "", lostBefore, sandlotv1.ReasonPodRunning, false},
		"failed: its reason wins": {sandlotv1.SandboxFailed, "p", lostBefore, sandlotv1.ReasonPodRunning, false},
	}
	for name, tc := range cases {
		sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: 3}}
		sbx.Status.Phase, sbx.Status.PodName = tc.phase, tc.pod
		// As the reconcile left Ready from the pod, just before.
		meta.SetStatusCondition(&sbx.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionReady,
			Status: metav1.ConditionTrue, Reason: sandlotv1.ReasonPodRunning})
		MarkTokenLost(sbx, tc.prev)
		c := meta.FindStatusCondition(sbx.Status.Conditions, sandlotv1.ConditionReady)
		if c.Reason != tc.reason {
			t.Errorf("%s: Ready %s %s, want reason %s", name, c.Status, c.Reason, tc.reason)
			continue
		}
		if tc.reason == sandlotv1.ReasonTokenSecretLost && (c.Status != metav1.ConditionFalse ||
			!strings.Contains(c.Message, "s-envd-token") || c.ObservedGeneration != 3) {
			t.Errorf("%s: Ready %+v", name, c)
		}
		if kept := c.LastTransitionTime.Equal(&then); tc.reason == sandlotv1.ReasonTokenSecretLost && kept != tc.keepTime {
			t.Errorf("%s: transition time kept = %v, want %v", name, kept, tc.keepTime)
		}
	}
}

// TestTokenSecretEvents: the sandbox wakes for what happens to its token
// Secret by other hands, not for its own create of it.
func TestTokenSecretEvents(t *testing.T) {
	now := metav1.Now()
	secret := func(deleting bool, finalizers ...string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s-envd-token", Finalizers: finalizers}}
		if deleting {
			s.DeletionTimestamp = &now
		}
		return s
	}
	held := sandlotv1.FinalizerTokenInUse
	creates := map[string]struct {
		s    *corev1.Secret
		wake bool
	}{
		"the controller's own, held":       {secret(false, held), false},
		"an older controller's, unheld":    {secret(false), true},
		"held, deleting (an orphan's)":     {secret(true, held), true},
		"restored by hand, without a hold": {secret(false), true},
		"with another's finalizer only":    {secret(false, "x/y"), true},
	}
	p := TokenSecretEvents()
	for name, tc := range creates {
		if got := p.Create(event.CreateEvent{Object: tc.s}); got != tc.wake {
			t.Errorf("create, %s: wakes = %v, want %v", name, got, tc.wake)
		}
	}
	updates := map[string]struct {
		old, cur *corev1.Secret
		wake     bool
	}{
		"a label":                {secret(false, held), func() *corev1.Secret { s := secret(false, held); s.Labels = map[string]string{"a": "b"}; return s }(), false},
		"deleted by hand (held)": {secret(false, held), secret(true, held), true},
		"the hold removed":       {secret(true, held), secret(true), true},
		"held (an older Secret)": {secret(false), secret(false, held), true},
		"data only, while held":  {secret(true, held), secret(true, held), false},
	}
	for name, tc := range updates {
		if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.cur}); got != tc.wake {
			t.Errorf("update, %s: wakes = %v, want %v", name, got, tc.wake)
		}
	}
	if !p.Delete(event.DeleteEvent{Object: secret(false)}) {
		t.Error("a deletion does not wake the sandbox")
	}
}

// TestReportHeldOnce: one Event per held deletion, whatever the number of
// reconciles; a later deletion (a new Secret) is reported again.
func TestReportHeldOnce(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &Tokens{Recorder: rec}
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}}
	first := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s-envd-token", UID: "u1"}}
	for range 3 {
		r.reportHeld(sbx, first)
	}
	second := first.DeepCopy()
	second.UID = "u2"
	r.reportHeld(sbx, second)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "Warning "+sandlotv1.ReasonTokenSecretDeletionHeld) {
		t.Fatalf("events %q, want two %s warnings", got, sandlotv1.ReasonTokenSecretDeletionHeld)
	}
}
