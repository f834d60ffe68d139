package scale

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubelet runs the fleet's pods: Running and Ready with an IP PodDelay
// after it first sees them, and gone at once when deleted (their
// containers stop immediately).
type kubelet struct{ f *Fleet }

func (k *kubelet) start(ctx context.Context) error {
	return k.f.watchQueue(ctx, &corev1.Pod{}, k.f.Workers, k.handle)
}

func (k *kubelet) handle(ctx context.Context, key client.ObjectKey) (time.Duration, error) {
	pod := &corev1.Pod{}
	if err := k.f.cache.Get(ctx, key, pod); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if !simulated(pod.Spec.NodeName) {
		return 0, nil // not bound (sandlot binds its pods itself), or the real node's
	}
	if pod.DeletionTimestamp != nil {
		uid := pod.UID
		err := k.f.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			k.f.forget(string(uid))
			return 0, nil
		}
		return 0, err
	}
	if pod.Status.Phase != "" && pod.Status.Phase != corev1.PodPending {
		return 0, nil
	}
	if wait := time.Until(k.f.firstSeen(string(pod.UID)).Add(k.f.PodDelay)); wait > 0 {
		return wait, nil
	}
	return 0, k.run(ctx, pod)
}

// run writes the status a kubelet writes once the pod's containers run.
func (k *kubelet) run(ctx context.Context, pod *corev1.Pod) error {
	now := metav1.Now()
	pod = pod.DeepCopy()
	ip := k.f.podIP()
	pod.Status.Phase, pod.Status.PodIP, pod.Status.StartTime = corev1.PodRunning, ip, &now
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			Started: ptrTrue(), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	err := k.f.c.Status().Update(ctx, pod)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func ptrTrue() *bool { t := true; return &t }
