package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodMemo: a value is the pod's, not a later pod's of the same name,
// and goes when the pod does.
func TestPodMemo(t *testing.T) {
	var m podMemo
	first := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "1"}}
	m.set(first, "rules")
	if v, ok := m.get(first); !ok || v != "rules" {
		t.Fatalf("get = %q, %v", v, ok)
	}
	again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "2"}}
	if v, ok := m.get(again); ok {
		t.Fatalf("a new pod of the name got %q, remembered for the one before", v)
	}
	m.forget(podKey(first))
	if _, ok := m.get(first); ok {
		t.Fatal("remembered after forget")
	}
	n := 0
	m.m.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d entries left", n)
	}
}
