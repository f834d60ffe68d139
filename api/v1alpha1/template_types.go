package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TemplateSpec describes the VM every Sandbox of this template starts as.
type TemplateSpec struct {
	// Image is an OCI image reference present in the nodes' containerd.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._/:@-]*$`
	Image string `json:"image"`

	// Resources of each VM; vcpu defaults to 1, memoryMiB to 512.
	// +kubebuilder:default={vcpu: 1, memoryMiB: 512}
	// +optional
	Resources Resources `json:"resources,omitempty"`

	// WritableLayerMiB is the size of each sandbox's writable disk layer.
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=1048576
	// +kubebuilder:default=1024
	// +optional
	WritableLayerMiB int32 `json:"writableLayerMiB,omitempty"`

	// Ports the sandbox serves (informational; the proxy routes any port).
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Ports []int32 `json:"ports,omitempty"`

	// ReadinessProbe decides when a booted VM is ready to be snapshotted
	// as the template's base (default: envd's GET /health on 49983).
	// +optional
	ReadinessProbe *ReadinessProbe `json:"readinessProbe,omitempty"`

	// ImagePullSecrets name Secrets in the template's namespace that
	// every pod of the template (its builder, warm pool, slots and
	// sandboxes) pulls Image with, beside those of the namespace's
	// default ServiceAccount. Whether a node pulls or uses the image it
	// has is the operator's policy (the chart's sandbox.imagePullPolicy).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Env is set in every sandbox of this template; a Sandbox's env wins.
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []EnvVar `json:"env,omitempty"`

	// WarmPool is how many VMs each node keeps restored from the base
	// snapshot and paused, ready for new sandboxes of this template to
	// claim (no pod start); 0 keeps none. A paused pool VM holds ~45 MiB
	// of host memory (an idle 192 MiB TCG guest sharing its base), so the
	// bound is what a large node holds, not what a small one should.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	WarmPool int32 `json:"warmPool,omitempty"`

	// Slots is how many start slots each node keeps for this template:
	// pods started already with no VM in them, which a new sandbox of the
	// template, a restore of its snapshots and a resume of its paused
	// sandboxes claim when no warm pool pod is free, so their start is
	// the restore alone (no pod start). A slot holds no guest memory (its
	// shim and pod sandbox only) but reserves the template's CPU and
	// memory requests on its node. Unset: the controller's
	// --slots-per-node; 0 keeps none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	Slots *int32 `json:"slots,omitempty"`

	// Tolerations let this template's sandboxes, base snapshot builders and
	// warm pool pods run on nodes with matching taints: the controller
	// places them on no node with a NoSchedule or NoExecute taint that
	// neither these nor the sandlot RuntimeClass's scheduling tolerations
	// tolerate, and copies them into those pods. Clones of a snapshot of
	// one of its sandboxes follow the template too.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// NodeSelector restricts this template's sandboxes, builders and pool
	// pods to nodes with all these labels (besides sandlot.dev/runtime and
	// the RuntimeClass's node selector); it is copied into their pods.
	// +mapType=atomic
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Build, when set, runs E2B template build steps in each builder VM
	// after it boots the image and before the base snapshot is taken.
	// +optional
	Build *TemplateBuild `json:"build,omitempty"`

	// TimeoutSeconds is the default lifetime of a sandbox of this template.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2592000
	// +kubebuilder:default=300
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// ReadinessProbe checks the guest: exactly one of httpGet and tcpSocket.
// +kubebuilder:validation:XValidation:rule="has(self.httpGet) != has(self.tcpSocket)",message="readinessProbe needs exactly one of httpGet and tcpSocket"
type ReadinessProbe struct {
	// +optional
	HTTPGet *HTTPGetProbe `json:"httpGet,omitempty"`
	// +optional
	TCPSocket *TCPSocketProbe `json:"tcpSocket,omitempty"`
	// TimeoutSeconds bounds the wait for the probe to pass after boot.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:default=120
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// HTTPGetProbe passes on a 2xx/3xx answer to GET path on port.
type HTTPGetProbe struct {
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:default="/"
	// +optional
	Path string `json:"path,omitempty"`
}

// TCPSocketProbe passes when port accepts a connection.
type TCPSocketProbe struct {
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// BasePhase is where a node's base snapshot of a template stands.
// +kubebuilder:validation:Enum=Building;Ready;Failed
type BasePhase string

const (
	BaseBuilding BasePhase = "Building"
	BaseReady    BasePhase = "Ready"
	BaseFailed   BasePhase = "Failed"
)

// BaseSnapshot is a template's base snapshot on one node: a builder
// Sandbox booted the image there cold, passed the readiness probe and was
// snapshotted; sandboxes of the template restore it.
type BaseSnapshot struct {
	Node string `json:"node"`
	// Revision digests the template spec it was built from (image,
	// resources, writable layer, probe, env): a change of those builds a
	// new base; one of the pool size or timeout does not.
	Revision string `json:"revision"`
	// Guest is the node's guest (its sandlot.dev/guest annotation: the
	// kernel and initramfs digest) the base was built with; a node whose
	// guest changes gets a new base, the old one serving until it is
	// Ready. Empty: built before guests were recorded.
	// +optional
	// +kubebuilder:default=""
	Guest string    `json:"guest,omitempty"`
	Phase BasePhase `json:"phase"`
	// Snapshot names the Snapshot (owned by the Template); the builder
	// Sandbox has the same name while it runs.
	Snapshot string `json:"snapshot"`
	// RemoteStatus is the Snapshot's: Ready lets any compatible node
	// restore it.
	// +optional
	RemoteStatus RemoteStatus `json:"remoteStatus,omitempty"`
	// Reason and Message say why it is not Ready (ImageMissing,
	// BuilderLost, ProbeTimeout, BuildFailed, InvalidImage).
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// Attempts counts the builds of this revision on the node, the
	// current one included: a failure that can pass (ImageMissing,
	// BuilderLost) is built again with backoff.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// RetryAt is when a Failed build that can pass is tried again; unset
	// for one that cannot (it stays Failed until the spec changes).
	// +optional
	RetryAt *metav1.Time `json:"retryAt,omitempty"`
}

// NodePool is a node's warm pool: Ready pods hold a restored, paused VM a
// sandbox can claim; Starting ones are being restored. Slots counts the
// node's start slots that run (empty pods a start restores into).
type NodePool struct {
	Node     string `json:"node"`
	Ready    int32  `json:"ready"`
	Starting int32  `json:"starting"`
	// +optional
	Slots int32 `json:"slots,omitempty"`
	// Message says why the pool is not refilled on the node now (its
	// kubelet refused a pool pod for lack of room).
	// +optional
	Message string `json:"message,omitempty"`
}

// TemplateStatus reports validation and the base snapshots.
type TemplateStatus struct {
	// Pool counts each node's warm pool pods of the current revision.
	// +optional
	// +listType=map
	// +listMapKey=node
	Pool []NodePool `json:"pool,omitempty"`
	// BaseRevision is the revision of the current spec's base snapshots.
	// +optional
	BaseRevision string `json:"baseRevision,omitempty"`
	// BaseSnapshots has one entry per node the template was built on.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +listMapKey=revision
	// +listMapKey=guest
	BaseSnapshots []BaseSnapshot `json:"baseSnapshots,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Template is a sandbox image with its VM shape: the E2B template.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tpl,categories=sandlot
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="vCPU",type=integer,JSONPath=`.spec.resources.vcpu`
// +kubebuilder:printcolumn:name="Memory",type=integer,JSONPath=`.spec.resources.memoryMiB`,priority=1
// +kubebuilder:printcolumn:name="Pool",type=integer,JSONPath=`.spec.warmPool`,priority=1
// +kubebuilder:printcolumn:name="Slots",type=integer,JSONPath=`.spec.slots`,priority=1
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Base",type=string,JSONPath=`.status.conditions[?(@.type=="BaseSnapshotReady")].reason`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="BaseSnapshotReady")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label: at most 63 lowercase letters, digits and '-'"
type Template struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TemplateSpec   `json:"spec"`
	Status TemplateStatus `json:"status,omitempty"`
}

// TemplateList is a list of Templates.
// +kubebuilder:object:root=true
type TemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Template `json:"items"`
}
