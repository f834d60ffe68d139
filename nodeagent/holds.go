package nodeagent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// restoreHolds answers the store's "may this key's local copy go?" (the
// s3 cache's eviction): not while a pod on this node was restored from it
// or from data that builds on it. A restore's own Open is released once
// the VM has mapped its files, but the VM's later snapshots, a rollback
// and the next restore on this node name those files by path.
type restoreHolds struct {
	pods   client.Reader // the agent's pod cache: this node's pods only
	layout *layout
}

// holdsTimeout bounds one answer; an error keeps the key.
const holdsTimeout = 5 * time.Second

// maxDepChain bounds the walk from a restore source to what it builds on
// (a snapshot of a restored VM of a snapshot ...: a few levels).
const maxDepChain = 64

func (h *restoreHolds) held(key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), holdsTimeout)
	defer cancel()
	pods := &corev1.PodList{}
	if err := h.pods.List(ctx, pods); err != nil {
		return true // unknown: keeping a copy costs only disk
	}
	for i := range pods.Items {
		if src := restoreKey(&pods.Items[i]); src != "" && h.reaches(src, key) {
			return true
		}
	}
	return false
}

// restoreKey is the store key a live pod's VM was restored from ("" for
// a cold boot, a finished pod or annotations that do not decode).
func restoreKey(pod *corev1.Pod) string {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return ""
	}
	ann, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
	if err != nil || ann.Restore == nil {
		return ""
	}
	key, err := stageapi.Key(ann.Restore.Kind, ann.Restore.UID)
	if err != nil {
		return ""
	}
	return key
}

// reaches says whether key is from itself or data that from builds on
// (through the manifests on this node; a key not here leads nowhere).
func (h *restoreHolds) reaches(from, key string) bool {
	seen := map[string]bool{}
	todo := []string{from}
	for len(todo) > 0 && len(seen) < maxDepChain {
		k := todo[0]
		todo = todo[1:]
		if k == key {
			return true
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		if deps, err := h.layout.deps(k); err == nil {
			todo = append(todo, deps...)
		}
	}
	return false
}
