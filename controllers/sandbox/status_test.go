package sandbox

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestViewPod(t *testing.T) {
	started := metav1.NewTime(time.Unix(1700000000, 0))
	now := metav1.Now()
	cases := []struct {
		name      string
		pod       corev1.Pod
		phase     sandlotv1.SandboxPhase
		ready     metav1.ConditionStatus
		reason    string
		podReason string
		ip        string
	}{
		{name: "pending", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}},
			phase: sandlotv1.SandboxStarting, ready: metav1.ConditionFalse, reason: sandlotv1.ReasonPodPending},
		{name: "running without IP", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			phase: sandlotv1.SandboxStarting, ready: metav1.ConditionFalse, reason: sandlotv1.ReasonPodPending},
		{name: "running", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.5",
			ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}}},
			phase: sandlotv1.SandboxRunning, ready: metav1.ConditionTrue, reason: sandlotv1.ReasonPodRunning, ip: "10.1.0.5"},
		{name: "running, its node gone quiet", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.5",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "NodeNotReady"}},
			ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}}},
			phase: sandlotv1.SandboxRunning, ready: metav1.ConditionFalse, reason: sandlotv1.ReasonPodNotReady, ip: "10.1.0.5"},
		{name: "evicted", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low memory"}},
			phase: sandlotv1.SandboxFailed, ready: metav1.ConditionFalse, reason: sandlotv1.ReasonPodFailed, podReason: "Evicted"},
		{name: "container OOM", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}},
			phase: sandlotv1.SandboxFailed, ready: metav1.ConditionFalse, reason: sandlotv1.ReasonPodFailed, podReason: "OOMKilled"},
		{name: "rejected by the kubelet", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu"}},
			phase: sandlotv1.SandboxPending, ready: metav1.ConditionFalse, reason: sandlotv1.ReasonPodRejected, podReason: "OutOfcpu"},
		{name: "succeeded", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
			phase: sandlotv1.SandboxTerminated, ready: metav1.ConditionFalse, reason: sandlotv1.ReasonPodSucceeded, podReason: sandlotv1.ReasonPodSucceeded},
		{name: "deleted under us", pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			phase: sandlotv1.SandboxFailed, ready: metav1.ConditionFalse, reason: sandlotv1.ReasonPodLost, podReason: sandlotv1.ReasonPodLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := viewPod(&tc.pod)
			if v.Phase != tc.phase || v.Ready != tc.ready || v.Reason != tc.reason || v.PodReason != tc.podReason || v.IP != tc.ip {
				t.Fatalf("view = %+v; want phase %s ready %s reason %s podReason %s ip %q", v, tc.phase, tc.ready, tc.reason, tc.podReason, tc.ip)
			}
			if tc.phase == sandlotv1.SandboxRunning && !v.StartedAt.Equal(&started) {
				t.Errorf("startedAt = %v, want %v", v.StartedAt, started)
			}
		})
	}
}

func TestVanishedClaimView(t *testing.T) {
	claimed := metav1.Condition{Type: sandlotv1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: sandlotv1.ReasonClaimedFromPool}
	placed := metav1.Condition{Type: sandlotv1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: "Placed"}
	vmReady := func(gen int64, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: sandlotv1.ConditionVMReady, Status: s, Reason: "VMRunning", ObservedGeneration: gen}
	}
	cases := []struct {
		name  string
		conds []metav1.Condition
		again bool
	}{
		{"its own pod, never ready", []metav1.Condition{placed}, false},
		{"its own pod, ready", []metav1.Condition{placed, vmReady(2, metav1.ConditionTrue)}, false},
		{"claimed, the claim never carried out", []metav1.Condition{claimed}, true},
		{"claimed, the claim failed", []metav1.Condition{claimed, vmReady(2, metav1.ConditionFalse)}, true},
		{"claimed by a resume, VMReady of the VM it paused", []metav1.Condition{claimed, vmReady(1, metav1.ConditionTrue)}, true},
		{"claimed and running as the sandbox", []metav1.Condition{claimed, vmReady(2, metav1.ConditionTrue)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Generation: 2},
				Status: sandlotv1.SandboxStatus{PodName: "python-pool-x", NodeName: "n1", Conditions: tc.conds}}
			v, again := vanishedClaimView(sbx)
			if again != tc.again {
				t.Fatalf("placed again = %v, want %v", again, tc.again)
			}
			if again && (!v.Replace || v.Reason != sandlotv1.ReasonClaimedPodLost || v.Phase != sandlotv1.SandboxPending) {
				t.Fatalf("view = %+v", v)
			}
		})
	}
}

func TestApplyPodViewSetsTerminalReason(t *testing.T) {
	st := sandlotv1.SandboxStatus{}
	applyPodView(&st, 3, podView{Phase: sandlotv1.SandboxFailed, Ready: metav1.ConditionFalse, Reason: sandlotv1.ReasonPodFailed,
		PodReason: "OOMKilled", Message: "boom"})
	if st.Reason != "OOMKilled" || st.Message != "boom" || st.Conditions[0].ObservedGeneration != 3 {
		t.Fatalf("status = %+v", st)
	}
}

func TestMergeEnv(t *testing.T) {
	got := sandlotv1.MergeEnv([]sandlotv1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
		[]sandlotv1.EnvVar{{Name: "B", Value: "x"}, {Name: "C", Value: "3"}})
	want := []sandlotv1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "x"}, {Name: "C", Value: "3"}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// TestScheduledFromPod: a pod found after the write that created or
// claimed it was lost still gives the sandbox its Scheduled condition,
// and a recorded one is kept.
func TestScheduledFromPod(t *testing.T) {
	placed := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	pooled := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pool-x", Labels: map[string]string{sandlotv1.LabelPool: "python"}},
		Spec: corev1.PodSpec{NodeName: "n2"}}
	recorded := []metav1.Condition{{Type: sandlotv1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: sandlotv1.ReasonPlaced, Message: "kept"}}
	cases := []struct {
		name       string
		conds      []metav1.Condition
		pod        corev1.Pod
		reason     string
		msgContain string
	}{
		{name: "created, write lost", pod: placed, reason: sandlotv1.ReasonPlaced, msgContain: "n1"},
		{name: "claimed, write lost", pod: pooled, reason: sandlotv1.ReasonClaimedFromPool, msgContain: "pool-x on n2"},
		{name: "recorded", conds: recorded, pod: pooled, reason: sandlotv1.ReasonPlaced, msgContain: "kept"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &sandlotv1.SandboxStatus{Conditions: append([]metav1.Condition(nil), c.conds...)}
			scheduledFromPod(st, 3, &c.pod)
			got := st.Conditions[0]
			if got.Type != sandlotv1.ConditionScheduled || got.Status != metav1.ConditionTrue || got.Reason != c.reason ||
				!strings.Contains(got.Message, c.msgContain) {
				t.Fatalf("condition %+v, want reason %s with %q", got, c.reason, c.msgContain)
			}
		})
	}
}

// TestNotBefore: a claimed warm pool pod's earlier start is not the
// sandbox's.
func TestNotBefore(t *testing.T) {
	created := metav1.NewTime(time.Unix(1700000100, 0))
	early, late := metav1.NewTime(time.Unix(1700000000, 0)), metav1.NewTime(time.Unix(1700000200, 0))
	if got := notBefore(&early, created); !got.Equal(&created) {
		t.Fatalf("pool pod started before the create: %v, want %v", got, created)
	}
	if got := notBefore(&late, created); !got.Equal(&late) {
		t.Fatalf("pod started after the create: %v, want %v", got, late)
	}
	if got := notBefore(nil, created); got != nil {
		t.Fatalf("no start: %v, want nil", got)
	}
}
