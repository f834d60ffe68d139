package template

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPoolBackoff: a pool pod the kubelet refused for lack of room stops
// the node's refill for poolRejectBackoff (instead of a refused pod a
// second), other failures are replaced at once, and a pool with what it
// wants keeps no failed pod.
func TestPoolBackoff(t *testing.T) {
	now := time.Unix(1700000000, 0)
	failed := func(name, reason string, age time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: "no room"}}
	}
	cases := []struct {
		name       string
		pods       []*corev1.Pod
		full       bool // the pool has what it wants: nothing to hold back
		wantRemove []string
		refused    string // a substring of the message; "" for none
	}{
		{name: "none"},
		{name: "a crash is replaced", pods: []*corev1.Pod{failed("a", "Error", time.Second)}, wantRemove: []string{"a"}},
		{name: "a fresh refusal holds the refill", pods: []*corev1.Pod{failed("b", "OutOfcpu", 5*time.Second)},
			refused: "kubelet refused pool pod b (OutOfcpu: no room)"},
		{name: "an old refusal is deleted", pods: []*corev1.Pod{failed("c", "OutOfmemory", poolRejectBackoff)}, wantRemove: []string{"c"}},
		{name: "a full pool deletes a fresh refusal", pods: []*corev1.Pod{failed("f", "OutOfcpu", time.Second)}, full: true,
			wantRemove: []string{"f"}},
		{name: "mixed", pods: []*corev1.Pod{failed("d", "Error", time.Second), failed("e", "OutOfcpu", time.Second)},
			wantRemove: []string{"d"}, refused: "pool pod e"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			remove, refused := poolBackoff(c.pods, !c.full, now)
			var names []string
			for _, p := range remove {
				names = append(names, p.Name)
			}
			if strings.Join(names, ",") != strings.Join(c.wantRemove, ",") {
				t.Errorf("remove %v, want %v", names, c.wantRemove)
			}
			if (c.refused == "") != (refused == "") || !strings.Contains(refused, c.refused) {
				t.Errorf("refused %q, want one with %q", refused, c.refused)
			}
		})
	}
}
