package nodeagent

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podMemo remembers a string per pod (by name, for this pod's UID only)
// until the pod is gone: what the VMReady reconciler had a pod's shim do
// (the rules it pushed, the claim it carried out), kept for as long as
// the pod lives and no longer.
type podMemo struct{ m sync.Map } // types.NamespacedName → podMemoEntry

type podMemoEntry struct {
	uid   types.UID
	value string
}

func podKey(pod *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
}

// get is what was remembered for this pod (not an earlier one of its name).
func (p *podMemo) get(pod *corev1.Pod) (string, bool) {
	v, ok := p.m.Load(podKey(pod))
	if !ok || v.(podMemoEntry).uid != pod.UID {
		return "", false
	}
	return v.(podMemoEntry).value, true
}

func (p *podMemo) set(pod *corev1.Pod, value string) {
	p.m.Store(podKey(pod), podMemoEntry{uid: pod.UID, value: value})
}

func (p *podMemo) forget(key types.NamespacedName) { p.m.Delete(key) }
