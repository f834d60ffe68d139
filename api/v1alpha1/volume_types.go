package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// VolumeSpec is a team's E2B volume: a directory tree in the cluster's
// volume storage (the chart's volumes.hostPath, a filesystem every node
// mounts), at <root>/<namespace>/<uid>: outside any node, so a sandbox
// mounting it may pause on one node and resume on another. Sandboxes
// mount it by its name (spec.volumeMounts); the snapshot of such a
// sandbox records the mount, never the volume's bytes.
type VolumeSpec struct {
	// Name is the volume's E2B name, unique in its namespace: what
	// volumeMounts name. The object's own name is its E2B volumeID.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_-]+$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="name is immutable"
	Name string `json:"name"`
}

// VolumePhase is whether a volume's directory exists.
// +kubebuilder:validation:Enum=Pending;Ready;Failed
type VolumePhase string

const (
	VolumePending VolumePhase = "Pending"
	VolumeReady   VolumePhase = "Ready"
	VolumeFailed  VolumePhase = "Failed"
)

// VolumeStatus reports a volume.
type VolumeStatus struct {
	// +optional
	Phase VolumePhase `json:"phase,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// Volume is a team's E2B volume; deleting it deletes its files.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vol,categories=sandlot
// +kubebuilder:printcolumn:name="E2B-Name",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.name`
type Volume struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VolumeSpec   `json:"spec"`
	Status VolumeStatus `json:"status,omitempty"`
}

// VolumeList is a list of Volumes.
// +kubebuilder:object:root=true
type VolumeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Volume `json:"items"`
}

// VolumeMount mounts the namespace's Volume of that E2B name at Path in
// the sandbox.
type VolumeMount struct {
	// Name is the Volume's spec.name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_-]+$`
	Name string `json:"name"`
	// Path is an absolute path in the guest, not / and without "..".
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && self != '/' && !self.matches('/[.][.]?(/|$)')",message="path is absolute, not /, without . or .. elements"
	Path string `json:"path"`
}

// FinalizerVolumeData holds a Volume until sandlot-api deleted its files.
const FinalizerVolumeData = "sandlot.dev/volume-data"
