package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SnapshotSource: exactly one of a running Sandbox or existing store data.
// +kubebuilder:validation:XValidation:rule="has(self.sandbox) != has(self.import)",message="source needs exactly one of sandbox and import"
type SnapshotSource struct {
	// Sandbox is the name of a running Sandbox in the same namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Sandbox string `json:"sandbox,omitempty"`
	// Import registers snapshot data already in the store.
	// +optional
	Import *SnapshotImport `json:"import,omitempty"`
}

// SnapshotImport names snapshot data already in the store.
type SnapshotImport struct {
	// Location is the data's location in the store.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Location string `json:"location"`
	// NodeName is the node whose agent verifies the data; any runtime
	// node when empty.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// SnapshotSpec: a snapshot is taken once, so its source never changes;
// its expiry may be set or changed later.
// +kubebuilder:validation:XValidation:rule="self.source == oldSelf.source",message="spec.source is immutable"
type SnapshotSpec struct {
	Source SnapshotSource `json:"source"`
	// ExpireAfterSeconds deletes the Snapshot (and its data) that long
	// after its creation; unset: the controller's default (the chart's
	// controller.snapshotExpirySeconds, none by default). Deletion still
	// waits for what depends on it.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ExpireAfterSeconds *int64 `json:"expireAfterSeconds,omitempty"`
}

// SnapshotStatus reports the data and where it may be restored.
type SnapshotStatus struct {
	DataStatus `json:",inline"`
	// SandboxID is the ID of the sandbox the snapshot was taken from.
	// +optional
	SandboxID string `json:"sandboxID,omitempty"`
	// Template is the template of that sandbox.
	// +optional
	Template string `json:"template,omitempty"`
	// VM is what a restore of this snapshot starts.
	// +optional
	VM VMSpec `json:"vm,omitempty"`
	// DependsOn is the data this snapshot's memory builds on (what its
	// sandbox's VM was restored from); that data is held while this
	// snapshot exists.
	// +optional
	DependsOn *DataRef `json:"dependsOn,omitempty"`
	// ExpiresAt is when the snapshot is deleted, if it expires.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// Snapshot is the saved state (memory, devices, disk) of a sandbox; new
// sandboxes restore from it copy-on-write.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=snap,categories=sandlot
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source.sandbox`
// +kubebuilder:printcolumn:name="RemoteStatus",type=string,JSONPath=`.status.remoteStatus`
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.totalBytes`,priority=1
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.status.location`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.status.dependsOn.name`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label: at most 63 lowercase letters, digits and '-'"
type Snapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SnapshotSpec   `json:"spec"`
	Status SnapshotStatus `json:"status,omitempty"`
}

// SnapshotList is a list of Snapshots.
// +kubebuilder:object:root=true
type SnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Snapshot `json:"items"`
}
