package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxSource names what a sandbox starts from: exactly one of a
// Template (restore its base snapshot, or boot it) or a Snapshot (clone).
// +kubebuilder:validation:XValidation:rule="has(self.template) != has(self.snapshot)",message="source needs exactly one of template and snapshot"
type SandboxSource struct {
	// Template is the name of a Template in the Sandbox's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Template string `json:"template,omitempty"`
	// Snapshot is the name of a Snapshot in the Sandbox's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
}

// TimeoutAction is what happens when a sandbox's timeout passes.
// +kubebuilder:validation:Enum=Delete;Pause
type TimeoutAction string

const (
	TimeoutDelete TimeoutAction = "Delete"
	TimeoutPause  TimeoutAction = "Pause"
)

// NodeLostAction is what happens to a running sandbox whose node is lost.
// +kubebuilder:validation:Enum=Report;Restore
type NodeLostAction string

const (
	// NodeLostReport fails the sandbox with reason NodeLost.
	NodeLostReport NodeLostAction = "Report"
	// NodeLostRestore starts it on another node from its newest Snapshot
	// whose data is in the shared store, once the node is known down.
	NodeLostRestore NodeLostAction = "Restore"
)

// RollbackRequest asks the node agent to restore the sandbox in place from
// one of its own snapshots; a new requestID asks again.
type RollbackRequest struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Snapshot string `json:"snapshot"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	RequestID string `json:"requestID"`
}

// SandboxSpec is the desired state of one sandbox VM.
type SandboxSpec struct {
	// Source is what the sandbox starts from; immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="source is immutable"
	Source SandboxSource `json:"source"`

	// Resources must match the template's or the snapshot's when given:
	// every sandbox restores a snapshot (a template's base, or its source).
	// +optional
	Resources *Resources `json:"resources,omitempty"`

	// Env adds to (and overrides) the template's env.
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []EnvVar `json:"env,omitempty"`

	// Metadata is free-form user data (E2B metadata), filterable by clients.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Metadata map[string]string `json:"metadata,omitempty"`

	// TimeoutSeconds is the sandbox's lifetime counted from its creation,
	// or from its last resume (E2B restarts the clock on resume); raise it
	// to extend a running sandbox. Paused sandboxes do not expire.
	// Defaults to the template's.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2592000
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// OnTimeout deletes (default) or pauses the sandbox when it expires.
	// +kubebuilder:default=Delete
	// +optional
	OnTimeout TimeoutAction `json:"onTimeout,omitempty"`

	// Paused is the desired pause state; the VM's state is kept in a
	// PausedSandbox of the same name while true.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// ResumeBy is how the next resume from a pause brings the VM back:
	// Restore (default) its memory and disk; Boot a cold boot on its disk,
	// processes and memory dropped (E2B's filesystem-only pause and
	// reboot-resume). Same sandbox ID, token and files either way.
	// +kubebuilder:validation:Enum=Restore;Boot
	// +optional
	ResumeBy ResumeMode `json:"resumeBy,omitempty"`

	// OnNodeLost is what happens when the node a sandbox runs on is lost:
	// Report (the default) fails it with reason NodeLost; Restore starts
	// it on another node, same sandbox ID, from its newest Snapshot whose
	// data is in the shared store (remoteStatus Ready): its memory and
	// files as of that snapshot. Restore waits until the node is known
	// down — its Node deleted, or tainted node.kubernetes.io/out-of-service
	// (Kubernetes' non-graceful node shutdown) — since a node that only
	// stopped answering may still run the VM.
	// +kubebuilder:default=Report
	// +optional
	OnNodeLost NodeLostAction `json:"onNodeLost,omitempty"`

	// Rollback restores the sandbox in place from one of its snapshots.
	// +optional
	Rollback *RollbackRequest `json:"rollback,omitempty"`

	// Network is the sandbox's traffic rules, enforced on its VM's tap by
	// the shim; changed live. Omitted: the node's defaults (ingress only
	// from sandlot-api's proxy and the node; egress to public addresses).
	// +kubebuilder:validation:XValidation:rule="(has(self.secretName) ? self.secretName : '') == (has(oldSelf.secretName) ? oldSelf.secretName : '')",message="network.secretName is immutable: the pod mounts it when it starts"
	// +optional
	Network *SandboxNetwork `json:"network,omitempty"`

	// VolumeMounts mount the namespace's Volumes (by their E2B name) in
	// the guest, served over NFS by the sandbox's shim; immutable. A
	// sandbox from a Snapshot takes its source's mounts when it names none.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeMounts are immutable"
	// +kubebuilder:validation:XValidation:rule="self.all(m, self.exists_one(o, o.path == m.path))",message="volumeMounts: each path once"
	// +listType=atomic
	// +optional
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
}

// SandboxNetwork is E2B's network configuration: allowOut beats denyOut
// and the node's default denials; allowInternetAccess false is denyOut
// 0.0.0.0/0.
// +kubebuilder:validation:XValidation:rule="!has(self.allowOut) || self.allowOut.all(e, isCIDR(e) ? (cidr(e).ip().family() == 4 && cidr(e).masked() == cidr(e)) : isIP(e) ? ip(e).family() == 4 : e.lowerAscii().matches('^([*][.])?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?[.])*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?[.]?$'))",message="allowOut: each entry is an IPv4 CIDR (no host bits), an IPv4 address, a domain or *.domain"
// +kubebuilder:validation:XValidation:rule="!has(self.denyOut) || self.denyOut.all(e, isCIDR(e) ? (cidr(e).ip().family() == 4 && cidr(e).masked() == cidr(e)) : (isIP(e) && ip(e).family() == 4))",message="denyOut: each entry is an IPv4 CIDR (no host bits) or an IPv4 address; domains cannot be denied"
type SandboxNetwork struct {
	// AllowOut lists destinations the sandbox may open connections to: a
	// CIDR ("8.8.8.0/24"), an IP, a domain ("example.com") or a wildcard
	// ("*.example.com", its subdomains). A domain is opened for the
	// addresses the sandbox's resolver answers for it, for the answer's TTL.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	// +optional
	AllowOut []string `json:"allowOut,omitempty"`

	// DenyOut lists CIDRs or IPs the sandbox may not open connections to.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=43
	// +listType=atomic
	// +optional
	DenyOut []string `json:"denyOut,omitempty"`

	// AllowInternetAccess false denies every destination AllowOut does
	// not name (E2B's allow_internet_access).
	// +optional
	AllowInternetAccess *bool `json:"allowInternetAccess,omitempty"`

	// Ingress opens the sandbox to new connections from any address, not
	// only from sandlot-api's proxy and its node.
	// +optional
	Ingress bool `json:"ingress,omitempty"`

	// Rules set headers on the sandbox's HTTP and HTTPS requests to a
	// domain (E2B's network.rules), so it can call an API with a key it
	// never holds: the node's egress proxy adds them, its own TLS
	// certificate signed by a CA made for this VM alone. A rule opens
	// nothing: allowOut and denyOut still decide what is reached.
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:rule="self.all(r, self.exists_one(o, o.domain == r.domain))",message="rules: each domain once"
	// +listType=atomic
	// +optional
	Rules []EgressRule `json:"rules,omitempty"`

	// SecretName is a Secret of the sandbox's namespace whose keys the
	// rules' ${e2b.secrets.KEY} placeholders name. Its pod mounts it for
	// the node (never the guest) to read: set when the sandbox is created,
	// and a sandbox naming it takes no warm pool VM.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// EgressProxy tunnels the sandbox's outbound TCP through a SOCKS5
	// proxy (E2B's egressProxy), after allowOut and denyOut: the node
	// opens each connection through it, fail closed. UDP (DNS, QUIC) is
	// not tunnelled.
	// +optional
	EgressProxy *EgressProxy `json:"egressProxy,omitempty"`
}

// ResumeMode is how a paused sandbox comes back.
type ResumeMode string

const (
	ResumeRestore ResumeMode = "Restore"
	ResumeBoot    ResumeMode = "Boot"
)

// SandboxPhase is the observed lifecycle state of a Sandbox.
// +kubebuilder:validation:Enum=Pending;Starting;Running;Pausing;Paused;Resuming;Failed;Terminated
type SandboxPhase string

const (
	SandboxPending    SandboxPhase = "Pending"
	SandboxStarting   SandboxPhase = "Starting"
	SandboxRunning    SandboxPhase = "Running"
	SandboxPausing    SandboxPhase = "Pausing"
	SandboxPaused     SandboxPhase = "Paused"
	SandboxResuming   SandboxPhase = "Resuming"
	SandboxFailed     SandboxPhase = "Failed"
	SandboxTerminated SandboxPhase = "Terminated"
)

// Terminal reports whether nothing will be started for the sandbox again.
func (p SandboxPhase) Terminal() bool { return p == SandboxFailed || p == SandboxTerminated }

// Usable reports whether clients may use the sandbox: Running, with a pod
// IP, and VMReady=True observed at minGeneration or later (a resume bumps
// the generation, so an older VMReady is the VM that was paused).
func (s *Sandbox) Usable(minGeneration int64) bool {
	c := meta.FindStatusCondition(s.Status.Conditions, ConditionVMReady)
	return s.Status.Phase == SandboxRunning && s.Status.PodIP != "" &&
		c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration >= minGeneration
}

// SandboxStatus is the observed state of a Sandbox.
type SandboxStatus struct {
	// +optional
	Phase SandboxPhase `json:"phase,omitempty"`
	// Reason is a CamelCase word saying why the sandbox is in its phase
	// when that phase is terminal or waiting (PodFailed's pod reason,
	// PausedStateDiscarded, InsufficientCapacity, ...).
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// SandboxID is the E2B-style ID: 20 chars of [a-z0-9], stable across
	// pause and resume.
	// +optional
	SandboxID string `json:"sandboxID,omitempty"`
	// Source is "template/<name>" or "snapshot/<name>", for display.
	// +optional
	Source string `json:"source,omitempty"`
	// Resources are the VM's, resolved from the spec and its source.
	// +optional
	Resources *Resources `json:"resources,omitempty"`
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// +optional
	PodName string `json:"podName,omitempty"`
	// +optional
	PodIP string `json:"podIP,omitempty"`
	// GuestVersion is the release of the guest agent the sandbox's VM runs
	// (written by its node's agent with VMReady): a VM restored from a
	// snapshot runs the guest the snapshot captured, which an upgrade
	// does not change. Bounded: the guest is not trusted (the shim keeps
	// only a version-shaped answer).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[0-9A-Za-z][0-9A-Za-z.+-]*$`
	GuestVersion string `json:"guestVersion,omitempty"`
	// StartedAt is when the current VM's pod started running.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// ExpiresAt is the creation (or last resume) time plus the timeout.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// LastResumedAt is when the sandbox last came back from a pause.
	// +optional
	LastResumedAt *metav1.Time `json:"lastResumedAt,omitempty"`
	// BaseSnapshot is the Template base snapshot the sandbox restored
	// from (sandboxes of a template never boot cold).
	// +optional
	BaseSnapshot string `json:"baseSnapshot,omitempty"`
	// RestoringFrom names the Snapshot the sandbox is being restored
	// from on another node after its node was lost (spec.onNodeLost
	// Restore); cleared once it runs there.
	// +optional
	RestoringFrom string `json:"restoringFrom,omitempty"`
	// BuildCheckpoint, on a template's builder, is the build step after
	// which the node agent waits for the checkpoint Snapshot (set with
	// the Built condition's reason BuildCheckpoint).
	// +kubebuilder:validation:Minimum=0
	// +optional
	BuildCheckpoint int32 `json:"buildCheckpoint,omitempty"`
	// LastRollbackRequestID is the last rollback the agent carried out.
	// +optional
	LastRollbackRequestID string `json:"lastRollbackRequestID,omitempty"`
	// Network is the spec.network the node enforces on the sandbox's VM
	// now (set once its agent applied it; nil with no rules or no VM).
	// +optional
	Network *SandboxNetwork `json:"network,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Sandbox is one AI-agent code sandbox: a microVM in a pod.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbx,categories=sandlot
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="ID",type=string,JSONPath=`.status.sandboxID`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.status.source`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.podIP`,priority=1
// +kubebuilder:printcolumn:name="Guest",type=string,JSONPath=`.status.guestVersion`,priority=1
// +kubebuilder:printcolumn:name="Expires",type=string,format=date-time,JSONPath=`.status.expiresAt`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.status.nodeName`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label: at most 63 lowercase letters, digits and '-'"
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSpec   `json:"spec"`
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxList is a list of Sandboxes.
// +kubebuilder:object:root=true
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}
