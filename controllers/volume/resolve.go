// Package volume resolves the Volumes a sandbox mounts for its pod.
package volume

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Resolve maps a VM's volumeMounts to the namespace's Volumes the shim
// serves. A mount whose Volume is missing, being deleted or not Ready
// waits (the message says which); nothing starts without its volumes.
func Resolve(ctx context.Context, r client.Reader, ns string, mounts []sandlotv1.VolumeMount) ([]sandlotv1.PodVolume, string, error) {
	if len(mounts) == 0 {
		return nil, "", nil
	}
	var list sandlotv1.VolumeList
	if err := r.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, "list volumes", fmt.Errorf("list volumes of %s: %w", ns, err)
	}
	out := make([]sandlotv1.PodVolume, 0, len(mounts))
	for _, m := range mounts {
		v, msg := volumeNamed(list.Items, m.Name)
		if msg != "" {
			return nil, msg, nil
		}
		out = append(out, sandlotv1.PodVolume{Name: m.Name, UID: string(v.UID), Path: m.Path})
	}
	return out, "", nil
}

// volumeNamed is the one usable Volume of that E2B name, or why there is
// none.
func volumeNamed(vols []sandlotv1.Volume, name string) (*sandlotv1.Volume, string) {
	var found *sandlotv1.Volume
	for i := range vols {
		if vols[i].Spec.Name != name {
			continue
		}
		if found != nil {
			return nil, fmt.Sprintf("volume name %q is held by two Volumes (%s, %s)", name, found.Name, vols[i].Name)
		}
		found = &vols[i]
	}
	switch {
	case found == nil:
		return nil, fmt.Sprintf("volume %q not found", name)
	case found.DeletionTimestamp != nil:
		return nil, fmt.Sprintf("volume %q (%s) is being deleted", name, found.Name)
	case found.Status.Phase != sandlotv1.VolumeReady:
		return nil, fmt.Sprintf("volume %q (%s) is not ready (phase %q)", name, found.Name, found.Status.Phase)
	}
	return found, ""
}
