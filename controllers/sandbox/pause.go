package sandbox

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/data"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// pauseWorld is what the pause/resume decision looks at.
type pauseWorld struct {
	Paused  bool // spec.paused
	Phase   sandlotv1.SandboxPhase
	Pod     *corev1.Pod
	Package *sandlotv1.PausedSandbox
}

// pauseDecision says what to do; the reconciler carries it out. With Run
// set, the normal run flow (mirror the pod, or place and start one) goes on
// after the steps.
type pauseDecision struct {
	CreatePaused bool // create the PausedSandbox (the agent makes the package)
	DeletePod    bool // the package is Ready: the VM may go
	DeletePaused bool // release the package (resumed) or cancel the pause
	Restore      bool // start a pod that restores the package
	Run          bool
	Resuming     bool // a starting pod restores the package: phase Resuming

	Phase   sandlotv1.SandboxPhase // when not Run
	Fail    bool                   // Phase is Failed: terminal
	Reason  string
	Message string
}

// moving: a drain moves the sandbox off the node its move-from annotation
// names (controllers/drain): it is paused while its pod is there, and
// until its package is in the shared store another node restores from;
// then the resume places it on another node (the origin is cordoned).
func moving(sbx *sandlotv1.Sandbox, pod *corev1.Pod, pkg *sandlotv1.PausedSandbox) bool {
	from := sbx.Annotations[sandlotv1.AnnotationMoveFrom]
	switch {
	case from == "":
		return false
	case pod != nil:
		return pod.Spec.NodeName == from
	}
	return pkg != nil && pkg.Status.RemoteStatus != sandlotv1.RemoteReady
}

// newPodName names a new pod of sbx: the sandbox's own name, but another
// for a sandbox a drain moves: kubectl drain evicts pods by name, and
// took the resumed pod on the other node (Pending: no budget applies) for
// the one it drained.
func newPodName(sbx *sandlotv1.Sandbox) string {
	from := sbx.Annotations[sandlotv1.AnnotationMoveFrom]
	if from == "" {
		return sbx.Name
	}
	sum := sha256.Sum256([]byte(from))
	return sbx.Name[:min(len(sbx.Name), 240)] + "-" + hex.EncodeToString(sum[:3])
}

// resumePending: the package's pod does not run it yet — it waits for a
// node or for the paused pod to go, or it is a claimed warm pool pod that
// runs (Running, as any claim) before the agent restored the package
// into it. Until then the sandbox is Resuming (and does not expire).
func resumePending(phase sandlotv1.SandboxPhase, pod *corev1.Pod) bool {
	switch phase {
	case sandlotv1.SandboxStarting, sandlotv1.SandboxPending:
		return true
	case sandlotv1.SandboxRunning:
		return pod != nil && sandlotv1.ClaimPending(pod.Annotations)
	}
	return false
}

// markResuming shows a resume that resumePending found unfinished: not
// Ready either, a claimed pod's readiness being its warm VM's.
func markResuming(sbx *sandlotv1.Sandbox, pod *corev1.Pod) {
	st := &sbx.Status
	if st.Phase == sandlotv1.SandboxRunning {
		writes.SetCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionReady, metav1.ConditionFalse,
			sandlotv1.ReasonResuming, "the node agent is restoring the paused sandbox into claimed pool pod "+pod.Name)
	}
	st.Phase = sandlotv1.SandboxResuming
}

func waitIn(phase sandlotv1.SandboxPhase, reason, msg string) pauseDecision {
	return pauseDecision{Phase: phase, Reason: reason, Message: msg}
}

func fail(reason, msg string) pauseDecision {
	return pauseDecision{Phase: sandlotv1.SandboxFailed, Fail: true, Reason: reason, Message: msg}
}

var discarded = fail(sandlotv1.ReasonPausedStateDiscarded,
	"the PausedSandbox holding this sandbox's paused state was deleted")

// decidePause is the pause/resume state machine of DESIGN.md: pause makes
// a PausedSandbox (its VM stopped and saved by the agent), is Paused once
// the package is Ready, and removes the pod then;
// resume restores the package in a new pod and releases it only once that
// pod runs; a package deleted under a paused sandbox ends it.
func decidePause(w pauseWorld) pauseDecision {
	if w.Paused {
		return decideWhilePaused(w)
	}
	return decideWhileUnpaused(w)
}

func decideWhilePaused(w pauseWorld) pauseDecision {
	ps, pod := w.Package, w.Pod
	podAlive := pod != nil && pod.DeletionTimestamp == nil
	switch {
	case ps == nil && pod == nil:
		switch w.Phase {
		case sandlotv1.SandboxPausing, sandlotv1.SandboxPaused:
			return discarded
		case "", sandlotv1.SandboxPending:
			return waitIn(sandlotv1.SandboxPending, sandlotv1.ReasonPaused,
				"spec.paused is true: the sandbox starts when it turns false")
		}
		return pauseDecision{Run: true} // the run flow reports the lost pod
	case ps == nil:
		if podAlive && pod.Status.Phase == corev1.PodRunning {
			return pauseDecision{CreatePaused: true, Phase: sandlotv1.SandboxPausing,
				Reason: sandlotv1.ReasonPausing, Message: "waiting for the node agent to save the VM"}
		}
		if w.Phase == sandlotv1.SandboxPaused {
			return discarded // its pod still going: Paused comes before that
		}
		return pauseDecision{Run: true}
	case ps.DeletionTimestamp != nil:
		if !podAlive {
			return discarded
		}
		return waitIn(sandlotv1.SandboxPausing, sandlotv1.ReasonPausing,
			"waiting for a deleted PausedSandbox to go before pausing again")
	case ps.Status.Phase == sandlotv1.DataFailed:
		msg := "pausing failed: " + data.DataMessage(ps.Status.DataStatus)
		if podAlive {
			return pauseDecision{Run: true, Reason: sandlotv1.ReasonPauseFailed, Message: msg}
		}
		return fail(sandlotv1.ReasonPauseFailed, msg)
	case ps.Status.Phase == sandlotv1.DataReady:
		if pod == nil {
			return waitIn(sandlotv1.SandboxPaused, sandlotv1.ReasonPaused, "paused in PausedSandbox "+ps.Name)
		}
		// The agent stopped the VM before saving it: paused now; the
		// pod goes afterwards (a resume waits for it).
		return pauseDecision{DeletePod: podAlive, Phase: sandlotv1.SandboxPaused,
			Reason: sandlotv1.ReasonPaused, Message: "paused in PausedSandbox " + ps.Name + "; its pod is being removed"}
	case pod == nil:
		return fail(sandlotv1.ReasonPauseFailed, "the pod went away before the pause package was ready")
	}
	return waitIn(sandlotv1.SandboxPausing, sandlotv1.ReasonPausing, "waiting for the node agent to save the VM")
}

func decideWhileUnpaused(w pauseWorld) pauseDecision {
	ps, pod := w.Package, w.Pod
	switch {
	case ps == nil:
		if pod == nil && (w.Phase == sandlotv1.SandboxPaused || w.Phase == sandlotv1.SandboxPausing ||
			w.Phase == sandlotv1.SandboxResuming) {
			return discarded
		}
		return pauseDecision{Run: true}
	case pod != nil && sandlotv1.PodRestoresFrom(pod.Annotations, string(ps.UID)):
		// The pod restores this package: release it once the pod runs it
		// (a claimed warm pool pod runs before its VM is restored).
		running := pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && !sandlotv1.ClaimPending(pod.Annotations)
		return pauseDecision{Run: true, Resuming: true, DeletePaused: running && ps.DeletionTimestamp == nil}
	case pod != nil && pod.DeletionTimestamp == nil && w.Phase != sandlotv1.SandboxPaused:
		// Unpaused before the pause completed: the VM runs on (the agent
		// lets it run again when its package goes); drop the package.
		return pauseDecision{Run: true, DeletePaused: ps.DeletionTimestamp == nil}
	case pod != nil:
		// Paused: the VM was stopped and saved and its pod deleted (a
		// cache may not show that yet): restore the package once it went.
		d := waitIn(sandlotv1.SandboxPausing, sandlotv1.ReasonPausing, "waiting for the paused pod to go")
		d.DeletePod = pod.DeletionTimestamp == nil
		return d
	case ps.DeletionTimestamp != nil:
		return discarded
	case ps.Status.Phase == sandlotv1.DataReady:
		return pauseDecision{Restore: true, Run: true, Resuming: true}
	case ps.Status.Phase == sandlotv1.DataFailed:
		return fail(sandlotv1.ReasonPauseFailed, "pausing failed: "+data.DataMessage(ps.Status.DataStatus))
	}
	return fail(sandlotv1.ReasonPauseFailed, "the pod went away before the pause package was ready")
}
