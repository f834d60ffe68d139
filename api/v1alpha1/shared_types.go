package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Resources sizes a sandbox VM.
type Resources struct {
	// VCPU is the number of virtual CPUs.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	VCPU int32 `json:"vcpu,omitempty"`

	// MemoryMiB is the VM's memory in MiB.
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=262144
	// +optional
	MemoryMiB int32 `json:"memoryMiB,omitempty"`
}

// EnvVar is one environment variable of the sandbox's processes.
type EnvVar struct {
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Value string `json:"value,omitempty"`
}

// RemoteStatus answers: may another node restore this data now?
// +kubebuilder:validation:Enum=Pending;InProgress;Ready;Failed;NotApplicable
type RemoteStatus string

const (
	RemotePending       RemoteStatus = "Pending"
	RemoteInProgress    RemoteStatus = "InProgress"
	RemoteReady         RemoteStatus = "Ready"
	RemoteFailed        RemoteStatus = "Failed"
	RemoteNotApplicable RemoteStatus = "NotApplicable"
)

// DataPhase is the lifecycle of a Snapshot or PausedSandbox.
// +kubebuilder:validation:Enum=Pending;Creating;Ready;Failed;Lost
type DataPhase string

const (
	DataPending  DataPhase = "Pending"
	DataCreating DataPhase = "Creating"
	DataReady    DataPhase = "Ready"
	DataFailed   DataPhase = "Failed"
	// DataLost: the data's node is gone and no remote copy existed.
	DataLost DataPhase = "Lost"
)

// Fingerprint is what a node must match to restore a VM's state.
type Fingerprint struct {
	// CPU is the CPU model and flags digest of the node of origin.
	// +optional
	CPU string `json:"cpu,omitempty"`
	// Kernel is the guest kernel's digest.
	// +optional
	Kernel string `json:"kernel,omitempty"`
	// QEMU is the QEMU version that saved the device state.
	// +optional
	QEMU string `json:"qemu,omitempty"`
	// Accel is kvm or tcg.
	// +optional
	Accel string `json:"accel,omitempty"`
}

// Key is the single string a node's LabelFingerprint must equal.
func (f Fingerprint) Key() string {
	if f == (Fingerprint{}) {
		return ""
	}
	return f.CPU + "." + f.Kernel + "." + f.QEMU + "." + f.Accel
}

// DataStatus describes snapshot data in the store; Snapshot and
// PausedSandbox share it. The controller sets phase and nodeName; the node
// agent fills in the rest.
type DataStatus struct {
	// +optional
	Phase DataPhase `json:"phase,omitempty"`
	// NodeName is the node whose agent makes (or made) the data.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Location is where the data lives in the store.
	// +optional
	Location string `json:"location,omitempty"`
	// TotalBytes is the size of the data.
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// DirtyBytes is the memory the VM changed since its base.
	// +optional
	DirtyBytes int64 `json:"dirtyBytes,omitempty"`
	// SourcePausedMicroseconds is how long the source VM was paused to
	// take the data (a fork's cost to its parent).
	// +optional
	SourcePausedMicroseconds int64 `json:"sourcePausedMicroseconds,omitempty"`
	// BaseDiskSHA256 is the digest of the read-only base disk under it.
	// +optional
	BaseDiskSHA256 string `json:"baseDiskSHA256,omitempty"`
	// +optional
	Fingerprint Fingerprint `json:"fingerprint,omitempty"`
	// RemoteStatus says whether another node may restore the data yet.
	// +optional
	RemoteStatus RemoteStatus `json:"remoteStatus,omitempty"`
	// CompletionTime is when the data was persisted on its node.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// RemoteReadyTime is when RemoteStatus became Ready.
	// +optional
	RemoteReadyTime *metav1.Time `json:"remoteReadyTime,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DataRef names snapshot data another's builds on: a restored VM's
// memory is its source's plus the pages it changed, so the source's data
// must outlive it.
type DataRef struct {
	// Kind is Snapshot or PausedSandbox.
	// +kubebuilder:validation:Enum=Snapshot;PausedSandbox
	Kind string `json:"kind"`
	// Name is the object's name, in the same namespace.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UID is the object's UID, when known.
	// +optional
	UID string `json:"uid,omitempty"`
}

// VMSpec is what a VM was started from; a Snapshot or PausedSandbox
// records it so a restore needs nothing else.
type VMSpec struct {
	// Image is the OCI image whose rootfs is the VM's base disk.
	// +optional
	Image string `json:"image,omitempty"`
	// +optional
	Resources Resources `json:"resources,omitempty"`
	// WritableLayerMiB is the size of the writable disk layer.
	// +optional
	WritableLayerMiB int32 `json:"writableLayerMiB,omitempty"`
	// VolumeMounts are the Volumes the VM had mounted: a restore mounts
	// them again (their current contents; a snapshot holds no volume
	// bytes).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
}
