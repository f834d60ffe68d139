package sandbox

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Longer than 60 lines: a table, one row per case.
func TestDecidePause(t *testing.T) {
	now := metav1.Now()
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pending := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}
	deleting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pkg := func(phase sandlotv1.DataPhase) *sandlotv1.PausedSandbox {
		return &sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{UID: "pkg-1"},
			Status: sandlotv1.PausedSandboxStatus{DataStatus: sandlotv1.DataStatus{Phase: phase}}}
	}
	gone := pkg(sandlotv1.DataReady)
	gone.DeletionTimestamp = &now
	pkgRef := &sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindPausedSandbox, Name: "s", UID: "pkg-1", Location: "l"}
	resumed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: encodeAnnotations(t, sandlotv1.VMAnnotations{Restore: pkgRef})},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	restoring := resumed.DeepCopy()
	restoring.Status.Phase = corev1.PodPending
	// A warm pool pod claimed to restore the package: running before its
	// VM is restored, which the claim's activation marks.
	base := &sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: "base", UID: "base-1", Location: "b"}
	claimed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: encodeAnnotations(t, sandlotv1.VMAnnotations{Restore: base, Pool: "tpl",
		Claim: &sandlotv1.PoolClaim{Sandbox: "s", SandboxID: "abcdefghij0123456789", Restore: pkgRef}})}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	activated := claimed.DeepCopy()
	activated.Annotations[sandlotv1.AnnotationClaimActivated] = activated.Annotations[sandlotv1.AnnotationClaim]

	cases := []struct {
		name string
		w    pauseWorld
		want pauseDecision
	}{
		{"running, not paused", pauseWorld{Phase: sandlotv1.SandboxRunning, Pod: running}, pauseDecision{Run: true}},
		{"pause a running sandbox", pauseWorld{Paused: true, Phase: sandlotv1.SandboxRunning, Pod: running},
			pauseDecision{CreatePaused: true, Phase: sandlotv1.SandboxPausing, Reason: sandlotv1.ReasonPausing}},
		{"pause a starting sandbox waits for it to run", pauseWorld{Paused: true, Phase: sandlotv1.SandboxStarting, Pod: pending},
			pauseDecision{Run: true}},
		{"paused before it ever started", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPending},
			pauseDecision{Phase: sandlotv1.SandboxPending, Reason: sandlotv1.ReasonPaused}},
		{"package being made", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPausing, Pod: running, Package: pkg(sandlotv1.DataCreating)},
			pauseDecision{Phase: sandlotv1.SandboxPausing, Reason: sandlotv1.ReasonPausing}},
		{"package ready: remove the pod", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPausing, Pod: running, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{DeletePod: true, Phase: sandlotv1.SandboxPaused, Reason: sandlotv1.ReasonPaused}},
		{"paused, pod going", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPaused, Pod: deleting, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{Phase: sandlotv1.SandboxPaused, Reason: sandlotv1.ReasonPaused}},
		{"paused", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPausing, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{Phase: sandlotv1.SandboxPaused, Reason: sandlotv1.ReasonPaused}},
		{"pause failed, VM still runs", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPausing, Pod: running, Package: pkg(sandlotv1.DataFailed)},
			pauseDecision{Run: true, Reason: sandlotv1.ReasonPauseFailed}},
		{"package deleted while paused", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPaused, Package: gone}, discarded},
		{"package deleted while paused, pod going", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPaused, Pod: deleting, Package: gone}, discarded},
		{"package vanished while paused, pod going", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPaused, Pod: deleting}, discarded},
		{"package vanished while paused", pauseWorld{Paused: true, Phase: sandlotv1.SandboxPaused}, discarded},
		{"resume: restore the package", pauseWorld{Phase: sandlotv1.SandboxPaused, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{Restore: true, Run: true, Resuming: true}},
		{"resume: pod restoring", pauseWorld{Phase: sandlotv1.SandboxResuming, Pod: restoring, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{Run: true, Resuming: true}},
		{"resume: pod runs, release the package", pauseWorld{Phase: sandlotv1.SandboxResuming, Pod: resumed, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{Run: true, Resuming: true, DeletePaused: true}},
		{"resume: package released", pauseWorld{Phase: sandlotv1.SandboxResuming, Pod: resumed, Package: gone}, pauseDecision{Run: true, Resuming: true}},
		{"resume into a pool pod: claim not carried out, keep the package", pauseWorld{Phase: sandlotv1.SandboxResuming, Pod: claimed, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{Run: true, Resuming: true}},
		{"resume into a pool pod: restored, release the package", pauseWorld{Phase: sandlotv1.SandboxResuming, Pod: activated, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{Run: true, Resuming: true, DeletePaused: true}},
		{"resume: package deleted before restore", pauseWorld{Phase: sandlotv1.SandboxPaused, Package: gone}, discarded},
		{"resume: package vanished", pauseWorld{Phase: sandlotv1.SandboxPaused}, discarded},
		{"unpaused before the pod went: cancel", pauseWorld{Phase: sandlotv1.SandboxPausing, Pod: running, Package: pkg(sandlotv1.DataCreating)},
			pauseDecision{Run: true, DeletePaused: true}},
		{"unpaused while the pod goes: wait", pauseWorld{Phase: sandlotv1.SandboxPausing, Pod: deleting, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{Phase: sandlotv1.SandboxPausing, Reason: sandlotv1.ReasonPausing}},
		{"unpaused once Paused, the pod's deletion not seen yet: no running on", pauseWorld{Phase: sandlotv1.SandboxPaused, Pod: running, Package: pkg(sandlotv1.DataReady)},
			pauseDecision{DeletePod: true, Phase: sandlotv1.SandboxPausing, Reason: sandlotv1.ReasonPausing}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := decidePause(tc.w)
			got.Message, tc.want.Message = "", ""
			if got != tc.want {
				t.Fatalf("decision = %+v\n          want %+v", got, tc.want)
			}
		})
	}
}

func encodeAnnotations(t *testing.T, a sandlotv1.VMAnnotations) map[string]string {
	t.Helper()
	m, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMoving: a sandbox marked to move off a node is paused while its pod
// is there and until its package is in the shared store.
func TestMoving(t *testing.T) {
	marked := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{sandlotv1.AnnotationMoveFrom: "a"}}}
	on := func(n string) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{NodeName: n}} }
	pkg := func(r sandlotv1.RemoteStatus) *sandlotv1.PausedSandbox {
		p := &sandlotv1.PausedSandbox{}
		p.Status.RemoteStatus = r
		return p
	}
	cases := []struct {
		name string
		sbx  *sandlotv1.Sandbox
		pod  *corev1.Pod
		pkg  *sandlotv1.PausedSandbox
		want bool
	}{
		{"not marked", &sandlotv1.Sandbox{}, on("a"), nil, false},
		{"its pod on the origin", marked, on("a"), nil, true},
		{"its pod elsewhere", marked, on("b"), nil, false},
		{"package not in the store yet", marked, nil, pkg(sandlotv1.RemoteInProgress), true},
		{"package in the store", marked, nil, pkg(sandlotv1.RemoteReady), false},
		{"no pod, no package", marked, nil, nil, false},
	}
	for _, c := range cases {
		if got := moving(c.sbx, c.pod, c.pkg); got != c.want {
			t.Errorf("%s: moving %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNewPodName(t *testing.T) {
	plain := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "hello"}}
	moving := plain.DeepCopy()
	moving.Annotations = map[string]string{sandlotv1.AnnotationMoveFrom: "node-1"}
	if got := newPodName(plain); got != "hello" {
		t.Errorf("a sandbox's pod is %q, want its name", got)
	}
	got := newPodName(moving)
	if got == "hello" || !strings.HasPrefix(got, "hello-") || newPodName(moving) != got {
		t.Errorf("a moved sandbox's pod is %q, want a stable name of its own", got)
	}
}

// TestResumePending: a resume is over once the package's pod runs it; a
// claimed warm pool pod runs before the agent restored the package into
// it (the drain suite saw a move report Running a second early).
func TestResumePending(t *testing.T) {
	claimed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{sandlotv1.AnnotationClaim: "c-1"}}}
	activated := claimed.DeepCopy()
	activated.Annotations[sandlotv1.AnnotationClaimActivated] = "c-1"
	plain := &corev1.Pod{}
	for _, tc := range []struct {
		phase sandlotv1.SandboxPhase
		pod   *corev1.Pod
		want  bool
	}{
		{sandlotv1.SandboxPending, nil, true},
		{sandlotv1.SandboxStarting, plain, true},
		{sandlotv1.SandboxRunning, claimed, true},
		{sandlotv1.SandboxRunning, activated, false},
		{sandlotv1.SandboxRunning, plain, false},
		{sandlotv1.SandboxFailed, claimed, false},
	} {
		if got := resumePending(tc.phase, tc.pod); got != tc.want {
			t.Errorf("%s, pod %v: %v, want %v", tc.phase, tc.pod.GetAnnotations(), got, tc.want)
		}
	}
}
