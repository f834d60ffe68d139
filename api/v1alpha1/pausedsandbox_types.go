package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// PausedSandboxSpec is what resuming the sandbox needs; the controller
// writes it when it creates the PausedSandbox, and only its expiry may
// change afterwards (a user keeps a package longer, or lets it go sooner).
// +kubebuilder:validation:XValidation:rule="self.sandboxID == oldSelf.sandboxID && self.nodeName == oldSelf.nodeName && self.podName == oldSelf.podName && self.vm == oldSelf.vm && has(self.dependsOn) == has(oldSelf.dependsOn) && (!has(self.dependsOn) || self.dependsOn == oldSelf.dependsOn)",message="spec is immutable except expireAfterSeconds"
type PausedSandboxSpec struct {
	// SandboxID is the paused sandbox's ID, kept across the resume.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]{20}$`
	SandboxID string `json:"sandboxID"`
	// NodeName is the node the sandbox was paused on.
	// +kubebuilder:validation:MinLength=1
	NodeName string `json:"nodeName"`
	// PodName is the pod whose VM is paused.
	// +kubebuilder:validation:MinLength=1
	PodName string `json:"podName"`
	// VM is what the resume restores.
	VM VMSpec `json:"vm"`
	// DependsOn is the data the paused VM's memory builds on (what it was
	// restored from); that data is held while this package exists.
	// +optional
	DependsOn *DataRef `json:"dependsOn,omitempty"`
	// ExpireAfterSeconds deletes the package (discarding the paused state)
	// that long after its creation; from the controller's default (the
	// chart's controller.pausedExpirySeconds; none by default, as E2B keeps
	// a paused sandbox until it is killed). It may be set or changed later.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ExpireAfterSeconds *int64 `json:"expireAfterSeconds,omitempty"`
}

// PausedSandboxStatus reports the pause package.
type PausedSandboxStatus struct {
	DataStatus `json:",inline"`
	// ExpiresAt is when the package is deleted, if it expires.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// PausedSandbox is the pause package (memory, disk and device state) of
// one paused Sandbox of the same name. Deleting it discards that state.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=psbx,categories=sandlot
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="ID",type=string,JSONPath=`.spec.sandboxID`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.metadata.ownerReferences[0].name`
// +kubebuilder:printcolumn:name="RemoteStatus",type=string,JSONPath=`.status.remoteStatus`
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.totalBytes`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.dependsOn.name`
type PausedSandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PausedSandboxSpec   `json:"spec"`
	Status PausedSandboxStatus `json:"status,omitempty"`
}

// PausedSandboxList is a list of PausedSandboxes.
// +kubebuilder:object:root=true
type PausedSandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PausedSandbox `json:"items"`
}
