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
// or from data that builds on it — a restore's own Open is released once
// the VM has mapped its files, but the VM's later snapshots, a rollback
// and the next restore on this node name those files by path — and not
// while this node's Snapshot or pause package of it waits for its remote
// status, which reads what it builds on from its manifest.
//
// It reads no Sandbox: a restore holds data through its pod (the pods of
// this node, in the cache by spec.nodeName, whatever their Sandbox's
// status says), and this is the local copy of one node. That no data is
// deleted while a Sandbox anywhere restores from it is the controller's
// hold (the in-use finalizer, from its cache of every Sandbox), not this.
type restoreHolds struct {
	cache  client.Reader // the agent's cache: this node's pods and data only
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
	if settling, err := h.settling(ctx, key); err != nil || settling {
		return true // unknown: keeping a copy costs only disk
	}
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods); err != nil {
		return true
	}
	for i := range pods.Items {
		if src := restoreKey(&pods.Items[i]); src != "" && h.reaches(src, key) {
			return true
		}
	}
	return false
}

// settling: key is the data of a Snapshot or PausedSandbox of this node
// whose remote status is not final yet.
func (h *restoreHolds) settling(ctx context.Context, key string) (bool, error) {
	snaps, pkgs := &sandlotv1.SnapshotList{}, &sandlotv1.PausedSandboxList{}
	if err := h.cache.List(ctx, snaps); err != nil {
		return false, err
	}
	if err := h.cache.List(ctx, pkgs); err != nil {
		return false, err
	}
	var objs []dataObject
	for i := range snaps.Items {
		objs = append(objs, snapshotObject{&snaps.Items[i]})
	}
	for i := range pkgs.Items {
		objs = append(objs, pausedObject{&pkgs.Items[i]})
	}
	for _, o := range objs {
		if k, err := stageapi.Key(o.Kind(), string(o.GetUID())); err == nil && k == key && !remoteFinal(o.Data().RemoteStatus) {
			return true, nil
		}
	}
	return false, nil
}

// restoreKey is the store key a live pod's VM was restored from ("" for
// a cold boot, a finished pod or annotations that do not decode).
func restoreKey(pod *corev1.Pod) string {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return ""
	}
	src := sandlotv1.PodSource(pod.Annotations)
	if src == nil {
		return ""
	}
	key, err := stageapi.Key(src.Kind, src.UID)
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
