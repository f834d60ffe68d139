package sandbox

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
)

func TestViewNetwork(t *testing.T) {
	rules := &sandlotv1.SandboxNetwork{AllowOut: []string{"example.com", "8.8.8.0/24"}, DenyOut: []string{"0.0.0.0/0"}}
	other := &sandlotv1.SandboxNetwork{AllowInternetAccess: new(false)}
	enc := func(n *sandlotv1.SandboxNetwork) string {
		v, err := sandlotv1.EncodeNetwork(n)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	pod := func(want, applied *sandlotv1.SandboxNetwork, raw ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{}}}
		if want != nil {
			p.Annotations[sandlotv1.AnnotationNetwork] = enc(want)
		}
		if applied != nil {
			p.Annotations[sandlotv1.AnnotationNetworkApplied] = enc(applied)
		}
		if len(raw) > 0 {
			p.Annotations[sandlotv1.AnnotationNetworkApplied] = raw[0]
		}
		return p
	}
	refused := errors.New("spec.network is refused: network.allowOut: \"999.1.1.1\" is neither")
	cases := []struct {
		name     string
		spec     *sandlotv1.SandboxNetwork
		specErr  error
		pod      *corev1.Pod
		status   metav1.ConditionStatus
		reason   string
		msg      string
		enforced *sandlotv1.SandboxNetwork
	}{
		{"no rules, no pod", nil, nil, nil, metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, "no rules", nil},
		{"rules, no pod (paused, pending)", rules, nil, nil, metav1.ConditionFalse, sandlotv1.ReasonNetworkPending, "no VM runs", nil},
		{"rules, agent not yet", rules, nil, pod(rules, nil), metav1.ConditionFalse, sandlotv1.ReasonNetworkPending, "waiting for the node agent", nil},
		{"rules applied", rules, nil, pod(rules, rules), metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, "enforces spec.network on pod p", rules},
		{"edited, old rules enforced", other, nil, pod(other, rules), metav1.ConditionFalse, sandlotv1.ReasonNetworkPending, "waiting", rules},
		{"rules removed, old still enforced", nil, nil, pod(nil, rules), metav1.ConditionFalse, sandlotv1.ReasonNetworkPending, "waiting", rules},
		{"no rules on a pod", nil, nil, pod(nil, nil), metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, "no rules", nil},
		{"no rules, agent wrote empty", nil, nil, pod(nil, nil, ""), metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, "no rules", nil},
		{"refused spec, pod keeps its rules", rules, refused, pod(rules, rules), metav1.ConditionFalse, sandlotv1.ReasonInvalidNetwork,
			"keeps the rules it has", rules},
		{"refused spec, no pod", rules, refused, nil, metav1.ConditionFalse, sandlotv1.ReasonInvalidNetwork, "999.1.1.1", nil},
		{"unreadable applied annotation", rules, nil, pod(rules, nil, "{not json"), metav1.ConditionFalse, sandlotv1.ReasonNetworkPending,
			"unreadable", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := viewNetwork(tc.spec, tc.specErr, tc.pod)
			if v.Status != tc.status || v.Reason != tc.reason || !strings.Contains(v.Message, tc.msg) {
				t.Errorf("got %s %s %q, want %s %s containing %q", v.Status, v.Reason, v.Message, tc.status, tc.reason, tc.msg)
			}
			if !equality.Semantic.DeepEqual(v.Enforced, tc.enforced) {
				t.Errorf("enforced %+v, want %+v", v.Enforced, tc.enforced)
			}
		})
	}
}

func TestApplyNetworkView(t *testing.T) {
	st := &sandlotv1.SandboxStatus{}
	rules := &sandlotv1.SandboxNetwork{AllowOut: []string{"example.com"}}
	applyNetworkView(st, 7, networkView{Enforced: rules, Status: metav1.ConditionTrue, Reason: sandlotv1.ReasonNetworkApplied, Message: "m"})
	c := st.Conditions[0]
	if st.Network != rules || c.Type != sandlotv1.ConditionNetworkApplied || c.ObservedGeneration != 7 || c.Status != metav1.ConditionTrue {
		t.Fatalf("status %+v", st)
	}
}

func TestVMAnnotationsCarryNetwork(t *testing.T) {
	rules := &sandlotv1.SandboxNetwork{AllowOut: []string{"*.example.com"}, Ingress: true}
	ann, err := podspec.VMAnnotations(podspec.Plan{SandboxID: "abcdefghij0123456789", Network: rules}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := sandlotv1.DecodeNetwork(ann[sandlotv1.AnnotationNetwork])
	if err != nil || !equality.Semantic.DeepEqual(got, rules) {
		t.Fatalf("annotation %q decodes to %+v (%v)", ann[sandlotv1.AnnotationNetwork], got, err)
	}
	pool := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		sandlotv1.AnnotationBoot: sandlotv1.BootCold, sandlotv1.AnnotationPool: "python"}}}
	claimed, err := claimAnnotations(pool, &sandlotv1.PoolClaim{Sandbox: "s", SandboxID: "abcdefghij0123456789"}, rules)
	if err != nil || claimed[sandlotv1.AnnotationNetwork] != ann[sandlotv1.AnnotationNetwork] || claimed[sandlotv1.AnnotationClaim] == "" {
		t.Fatalf("claim annotations %v (%v)", claimed, err)
	}
}
