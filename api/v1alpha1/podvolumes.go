package v1alpha1

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// AnnotationVolumes lists the Volumes a sandbox pod's shim serves to its
// VM (JSON, []PodVolume), set by the controller from the VM's
// volumeMounts. Only the controller may write sandlot.dev/ keys on pods
// (the chart's admission policy); the shim still serves only directories
// of the pod's own namespace (<volumes root>/<namespace>/<uid>).
const AnnotationVolumes = "sandlot.dev/volumes"

// PodVolume is one mounted Volume as the shim and the guest need it.
type PodVolume struct {
	// Name is the Volume's E2B name: the NFS export the guest mounts.
	Name string `json:"name"`
	// UID is the Volume object's UID: its directory's name.
	UID string `json:"uid"`
	// Path is where the guest mounts it.
	Path string `json:"path"`
}

var (
	volumeNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,63}$`)
	volumeUIDRE  = regexp.MustCompile(`^[a-f0-9-]{1,64}$`)
)

// MaxVolumeMounts bounds spec.volumeMounts (the CRD's MaxItems).
const MaxVolumeMounts = 16

// ValidVolumeMountPath reports whether p may be a mount path: absolute,
// not /, no . or .. elements, at most 255 bytes (the CRD's rule).
func ValidVolumeMountPath(p string) bool {
	if len(p) < 2 || len(p) > 255 || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return false
	}
	for _, el := range strings.Split(p[1:], "/") {
		if el == "." || el == ".." {
			return false
		}
	}
	return true
}

// validate checks each volume as the shim will use it: a name an export
// may have, a UID that is one path element, a mount path, each path and
// name once.
func validatePodVolumes(vs []PodVolume) error {
	if len(vs) > MaxVolumeMounts {
		return fmt.Errorf("annotation %s: %d volumes, at most %d", AnnotationVolumes, len(vs), MaxVolumeMounts)
	}
	paths, names := map[string]bool{}, map[string]bool{}
	for _, v := range vs {
		switch {
		case !volumeNameRE.MatchString(v.Name):
			return fmt.Errorf("annotation %s: volume name %q is not [a-zA-Z0-9_-]{1,63}", AnnotationVolumes, v.Name)
		case !volumeUIDRE.MatchString(v.UID):
			return fmt.Errorf("annotation %s: volume %s: uid %q is not a UID", AnnotationVolumes, v.Name, v.UID)
		case !ValidVolumeMountPath(v.Path):
			return fmt.Errorf("annotation %s: volume %s: path %q is not an absolute path without . or ..", AnnotationVolumes, v.Name, v.Path)
		case paths[v.Path] || names[v.Name]:
			return fmt.Errorf("annotation %s: volume %s or path %s twice", AnnotationVolumes, v.Name, v.Path)
		}
		paths[v.Path], names[v.Name] = true, true
	}
	return nil
}

func encodePodVolumes(m map[string]string, vs []PodVolume) error {
	if len(vs) == 0 {
		return nil
	}
	b, err := json.Marshal(vs)
	if err != nil {
		return fmt.Errorf("encode volumes: %w", err)
	}
	m[AnnotationVolumes] = string(b)
	return nil
}

func decodePodVolumes(m map[string]string) ([]PodVolume, error) {
	raw, ok := m[AnnotationVolumes]
	if !ok {
		return nil, nil
	}
	var vs []PodVolume
	if err := json.Unmarshal([]byte(raw), &vs); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationVolumes, err)
	}
	return vs, nil
}

// Mounts are the volumeMounts the pod's volumes came from.
func (a VMAnnotations) Mounts() []VolumeMount {
	var out []VolumeMount
	for _, v := range a.Volumes {
		out = append(out, VolumeMount{Name: v.Name, Path: v.Path})
	}
	return out
}
