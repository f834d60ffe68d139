package podspec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeletRejections are the reasons a kubelet refuses a pod at admission:
// its VM never started, so the sandbox may be placed again.
var KubeletRejections = map[string]bool{"OutOfcpu": true, "OutOfmemory": true, "OutOfpods": true,
	"OutOfephemeral-storage": true, "NodeAffinity": true, "UnexpectedAdmissionError": true}

// PodWaiting describes a pending pod, surfacing container errors such as
// ErrImagePull.
func PodWaiting(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		w := cs.State.Waiting
		switch {
		case w != nil && ImageMissingReasons[w.Reason]:
			return ImageFailure(cs.Image, pod.Spec.NodeName, w.Reason)
		case w != nil && w.Reason != "":
			return fmt.Sprintf("container %s waiting: %s: %s", cs.Name, w.Reason, w.Message)
		}
	}
	return "pod " + pod.Name + " is pending"
}

// ImageMissingReasons are the kubelet's waiting reasons for an image the
// node has not got and could not pull.
var ImageMissingReasons = map[string]bool{"ErrImageNeverPull": true, "ErrImagePull": true,
	"ImagePullBackOff": true, "InvalidImageName": true}

// ImageFailure says that a pod's image could not be had, and no more:
// the kubelet's message is the registry's answer (a port closed, a host
// unknown, a credential refused), which would make a tenant's template
// a scanner of what the node reaches. The pod's events keep it for the
// operator.
func ImageFailure(image, node, reason string) string {
	return fmt.Sprintf("image %s could not be pulled or found on node %s (%s); the node's policy and pull "+
		"Secrets decide which images a template may use", image, node, reason)
}

// Condition is the pod's condition of type ct, nil if absent.
func Condition(pod *corev1.Pod, ct corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == ct {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// Failure names why a pod failed: the pod's reason (Evicted, ...) or
// else its container's (OOMKilled, Error, ...), with the message.
func Failure(pod *corev1.Pod) (string, string) {
	reason, msg := pod.Status.Reason, pod.Status.Message
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			if reason == "" {
				reason = t.Reason
			}
			if msg == "" {
				msg = fmt.Sprintf("container %s exited with code %d: %s", cs.Name, t.ExitCode, t.Message)
			}
		}
	}
	if reason == "" {
		reason = "Unknown"
	}
	if msg == "" {
		msg = "pod " + pod.Name + " failed"
	}
	return reason, msg
}

// StartedAt is when the pod's container started running, else the pod.
func StartedAt(pod *corev1.Pod) *metav1.Time {
	for _, cs := range pod.Status.ContainerStatuses {
		if r := cs.State.Running; r != nil {
			t := r.StartedAt
			return &t
		}
	}
	return pod.Status.StartTime
}
