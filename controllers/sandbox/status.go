package sandbox

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// podView is what a Sandbox's status takes from its Pod.
type podView struct {
	Phase     sandlotv1.SandboxPhase
	Ready     metav1.ConditionStatus
	Reason    string // the condition's reason
	Message   string
	PodReason string // the pod's own reason when it failed (Evicted, OOMKilled, ...)
	IP        string
	StartedAt *metav1.Time
	// Replace: the pod never ran its VM; delete it and place again.
	Replace bool
}

// viewPod maps a Pod onto the Sandbox lifecycle. A pod that is being
// deleted without the controller asking is lost: the VM goes with it.
func viewPod(pod *corev1.Pod) podView {
	if pod.Status.Phase == corev1.PodFailed && podspec.KubeletRejections[pod.Status.Reason] {
		return podView{Phase: sandlotv1.SandboxPending, Ready: metav1.ConditionFalse, Replace: true,
			Reason: sandlotv1.ReasonPodRejected, PodReason: pod.Status.Reason,
			Message: fmt.Sprintf("kubelet on %s rejected pod %s (%s: %s); placing it again", pod.Spec.NodeName, pod.Name,
				pod.Status.Reason, pod.Status.Message)}
	}
	if pod.DeletionTimestamp != nil && sandlotv1.ClaimPending(pod.Annotations) {
		// A claimed warm pool pod going before its VM ran as the sandbox
		// (its node failed, someone deleted it): nothing of the sandbox
		// was in it, so it is placed again.
		return podView{Phase: sandlotv1.SandboxPending, Ready: metav1.ConditionFalse, Replace: true,
			Reason: sandlotv1.ReasonClaimedPodLost, PodReason: sandlotv1.ReasonClaimedPodLost,
			Message: fmt.Sprintf("claimed warm pool pod %s on %s went before the sandbox ran in it; placing it again", pod.Name, pod.Spec.NodeName)}
	}
	if pod.DeletionTimestamp != nil {
		return podView{Phase: sandlotv1.SandboxFailed, Ready: metav1.ConditionFalse,
			Reason: sandlotv1.ReasonPodLost, PodReason: sandlotv1.ReasonPodLost,
			Message: "pod " + pod.Name + " is being deleted"}
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		if pod.Status.PodIP == "" {
			return podView{Phase: sandlotv1.SandboxStarting, Ready: metav1.ConditionFalse,
				Reason: sandlotv1.ReasonPodPending, Message: "pod is running but has no IP yet"}
		}
		if c := podspec.Condition(pod, corev1.PodReady); c != nil && c.Status == corev1.ConditionFalse {
			return podView{Phase: sandlotv1.SandboxRunning, Ready: metav1.ConditionFalse,
				Reason: sandlotv1.ReasonPodNotReady, Message: fmt.Sprintf("pod %s is not ready: %s %s", pod.Name, c.Reason, c.Message),
				IP: pod.Status.PodIP, StartedAt: podspec.StartedAt(pod)}
		}
		return podView{Phase: sandlotv1.SandboxRunning, Ready: metav1.ConditionTrue,
			Reason: sandlotv1.ReasonPodRunning, Message: "pod " + pod.Name + " is running",
			IP: pod.Status.PodIP, StartedAt: podspec.StartedAt(pod)}
	case corev1.PodFailed:
		reason, msg := podspec.Failure(pod)
		return podView{Phase: sandlotv1.SandboxFailed, Ready: metav1.ConditionFalse,
			Reason: sandlotv1.ReasonPodFailed, PodReason: reason, Message: msg, IP: pod.Status.PodIP}
	case corev1.PodSucceeded:
		return podView{Phase: sandlotv1.SandboxTerminated, Ready: metav1.ConditionFalse,
			Reason: sandlotv1.ReasonPodSucceeded, PodReason: sandlotv1.ReasonPodSucceeded,
			Message: "the sandbox's process exited with status 0"}
	default:
		return podView{Phase: sandlotv1.SandboxStarting, Ready: metav1.ConditionFalse,
			Reason: sandlotv1.ReasonPodPending, Message: podspec.PodWaiting(pod)}
	}
}

// vanishedClaimView: a sandbox whose pod is gone without the controller
// seeing it terminate (deleted with no grace, garbage-collected) goes back
// to placement when that pod was a claimed warm pool pod whose node agent
// never reported this generation's VM ready — the claim was not carried
// out, so nothing of the sandbox was in it. Otherwise the loss is real.
func vanishedClaimView(sbx *sandlotv1.Sandbox) (podView, bool) {
	st := &sbx.Status
	sched := meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionScheduled)
	if sched == nil || (sched.Reason != sandlotv1.ReasonClaimedFromPool && sched.Reason != sandlotv1.ReasonClaimedStartSlot) {
		return podView{}, false
	}
	vm := meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionVMReady)
	if vm != nil && vm.Status == metav1.ConditionTrue && vm.ObservedGeneration >= sbx.Generation {
		return podView{}, false
	}
	return podView{Phase: sandlotv1.SandboxPending, Ready: metav1.ConditionFalse, Replace: true,
		Reason: sandlotv1.ReasonClaimedPodLost, PodReason: sandlotv1.ReasonClaimedPodLost,
		Message: fmt.Sprintf("claimed pool pod %s on %s disappeared before the sandbox ran in it; placing it again", st.PodName, st.NodeName)}, true
}

// applyPodView writes a pod's view into the Sandbox status.
func applyPodView(st *sandlotv1.SandboxStatus, gen int64, v podView) {
	st.Phase = v.Phase
	st.PodIP = v.IP
	if v.StartedAt != nil {
		st.StartedAt = v.StartedAt
	}
	st.Reason, st.Message = "", ""
	if v.Phase.Terminal() {
		st.Reason, st.Message = v.PodReason, v.Message
	}
	writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionReady, v.Ready, v.Reason, v.Message)
}

// setFailed ends a Sandbox: terminal, nothing is started for it again.
func setFailed(st *sandlotv1.SandboxStatus, gen int64, reason, msg string) {
	st.Phase = sandlotv1.SandboxFailed
	st.Reason, st.Message = reason, msg
	st.PodIP = ""
	writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionReady, metav1.ConditionFalse, reason, msg)
}

// setPending keeps a Sandbox waiting, saying why.
func setPending(st *sandlotv1.SandboxStatus, gen int64, reason, msg string) {
	if st.Phase == "" || st.Phase == sandlotv1.SandboxPending {
		st.Phase = sandlotv1.SandboxPending
	}
	st.Reason, st.Message = reason, msg
	writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionScheduled, metav1.ConditionFalse, reason, msg)
	writes.SetCondition(&st.Conditions, gen, sandlotv1.ConditionReady, metav1.ConditionFalse, reason, msg)
}

// expiry is when a sandbox created at created with this timeout expires.
func expiry(created metav1.Time, timeoutSeconds int32) *metav1.Time {
	t := metav1.NewTime(created.Add(time.Duration(timeoutSeconds) * time.Second))
	return &t
}
