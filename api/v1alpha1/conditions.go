package v1alpha1

// Condition types. Each is a metav1.Condition in a list keyed by type.
const (
	// ConditionScheduled: a Sandbox has a node, or a Snapshot/PausedSandbox
	// has the node that must act on it (controller).
	ConditionScheduled = "Scheduled"
	// ConditionReady: the controller's summary of a Sandbox (its Pod runs)
	// or of a Snapshot/PausedSandbox (its data is persisted, agent).
	ConditionReady = "Ready"
	// ConditionVMReady: the VM answers (owned by the node agent through
	// server-side apply with field manager "sandlot-agent"). Clients treat
	// VMReady=True as "usable".
	ConditionVMReady = "VMReady"
	// ConditionAccepted: a Template passed validation (controller).
	ConditionAccepted = "Accepted"
	// ConditionBaseSnapshotReady: a Template's base snapshot is built.
	ConditionBaseSnapshotReady = "BaseSnapshotReady"
	// ConditionDeletionHeld: a deleted Snapshot waits for the Sandboxes
	// restored from it to go.
	ConditionDeletionHeld = "DeletionHeld"
	// ConditionRemoteReady: the data may be restored on another node.
	ConditionRemoteReady = "RemoteReady"
	// ConditionRolledBack: the Sandbox's last rollback request (owned by
	// the node agent, like VMReady): True once done, False with why not.
	ConditionRolledBack = "RolledBack"
	// ConditionNetworkApplied: the node enforces the Sandbox's
	// spec.network on its VM (controller, from the pod's
	// AnnotationNetworkApplied, which the node agent sets).
	ConditionNetworkApplied = "NetworkApplied"
)

// Reasons of ConditionScheduled.
const (
	ReasonPlaced               = "Placed"
	ReasonNoEligibleNode       = "NoEligibleNode"
	ReasonInsufficientCapacity = "InsufficientCapacity"
	// ReasonReclaimingPoolPods: no node had room; unclaimed pool pods (warm
	// pods, start slots) on one give way to the sandbox.
	ReasonReclaimingPoolPods = "ReclaimingPoolPods"
	ReasonSourceNotFound     = "SourceNotFound"
	ReasonSourceNotReady     = "SourceNotReady"
	// ReasonVolumeNotReady: a Volume the sandbox mounts is missing, being
	// deleted, or its directory is not made yet.
	ReasonVolumeNotReady      = "VolumeNotReady"
	ReasonTemplateNotAccepted = "TemplateNotAccepted"
	ReasonSandboxNotRunning   = "SandboxNotRunning"
	ReasonNodeAssigned        = "NodeAssigned"
	// ReasonClaimedFromPool: the sandbox took a warm pool pod of its
	// template (restored and paused already).
	ReasonClaimedFromPool = "ClaimedFromPool"
	// ReasonClaimedStartSlot: the sandbox took a start slot of its
	// template (a pod with no VM), its data restored into it.
	ReasonClaimedStartSlot = "ClaimedStartSlot"
)

// Reasons of ConditionReady and of a Sandbox's terminal states.
const (
	ReasonPodPending = "PodPending"
	ReasonPodRunning = "PodRunning"
	// ReasonPodNotReady: the pod runs but is not Ready (e.g. its node
	// stopped reporting: the node lifecycle controller marks it so).
	ReasonPodNotReady          = "PodNotReady"
	ReasonPodFailed            = "PodFailed"
	ReasonPodSucceeded         = "PodSucceeded"
	ReasonPodLost              = "PodLost"
	ReasonPausing              = "Pausing"
	ReasonPaused               = "Paused"
	ReasonResuming             = "Resuming"
	ReasonExpired              = "Expired"
	ReasonPausedStateDiscarded = "PausedStateDiscarded"
	ReasonPauseFailed          = "PauseFailed"
	ReasonWaitingForAgent      = "WaitingForAgent"
	ReasonSourceFailed         = "SourceFailed"
	ReasonInvalidSpec          = "InvalidSpec"
	ReasonPodCreateFailed      = "PodCreateFailed"
	ReasonPodRejected          = "PodRejected"
	ReasonInUse                = "InUse"
	// ReasonTokenSecretLost: the Sandbox's token Secret is gone (its
	// FinalizerTokenInUse removed by hand) while a pod of it exists: its VM
	// keeps the token it booted with, which no client can be given now. No
	// token is drawn under it; the next pod (after a pause and resume)
	// boots with a new one.
	ReasonTokenSecretLost = "TokenSecretLost"
	// ReasonNodeLost: the sandbox's node is gone (deleted, out of
	// service) or stopped answering while its VM ran there; with
	// spec.onNodeLost Restore it is restored on another node.
	ReasonNodeLost = "NodeLost"
)

// ReasonTokenSecretDeletionHeld is the reason of the Event recorded on a
// Sandbox when a deletion of its token Secret is held by
// FinalizerTokenInUse (once per deletion).
const ReasonTokenSecretDeletionHeld = "TokenSecretDeletionHeld"

// Reasons of the Template conditions (and of a BaseSnapshot).
const (
	ReasonValid        = "Valid"
	ReasonInvalidImage = "InvalidImage"
	// ReasonBuilding: a builder sandbox boots the image, waits for the
	// probe, or is snapshotted.
	ReasonBuilding     = "Building"
	ReasonBaseReady    = "BaseSnapshotReady"
	ReasonImageMissing = "ImageMissing"
	ReasonProbeTimeout = "ProbeTimeout"
	ReasonBuildFailed  = "BuildFailed"
	// ReasonBuilderLost: the builder's pod went before its build ended
	// (evicted, its node lost or shut down): built again with backoff.
	ReasonBuilderLost = "BuilderLost"
	// ReasonBaseSnapshotDeleted: a Ready base's Snapshot was deleted (by
	// hand, a sweep): the base is built again on that node once it is gone.
	ReasonBaseSnapshotDeleted = "BaseSnapshotDeleted"
	// ReasonGuestChanged: the node's guest (kernel, initramfs and guest
	// agent: an upgrade) is not the one its Ready base captured; a base
	// of the new guest builds while the old one serves.
	ReasonGuestChanged = "GuestChanged"
)

// Event reasons of a drain (controllers/drain) on a Sandbox.
const (
	// ReasonMoving: its node is cordoned; it is paused there, to resume
	// on another node.
	ReasonMoving = "Moving"
	// ReasonMoved: it runs on another node than the cordoned one.
	ReasonMoved = "Moved"
	// ReasonCannotMove: its node is cordoned and it cannot move (no other
	// node for it, a local store); it holds the drain.
	ReasonCannotMove = "CannotMove"
)

// Reasons of ConditionRolledBack.
const (
	ReasonRolledBack      = "RolledBack"
	ReasonRollbackRefused = "RollbackRefused"
	ReasonRollbackFailed  = "RollbackFailed"
)

// ReasonBaseSnapshotNotReady: a sandbox of a template waits for the
// template's base snapshot (it never boots cold).
const ReasonBaseSnapshotNotReady = "BaseSnapshotNotReady"

// Reasons of ConditionNetworkApplied.
const (
	// ReasonNetworkApplied: the node agent applied spec.network (or there
	// are no rules and no VM to apply them to).
	ReasonNetworkApplied = "NetworkApplied"
	// ReasonNetworkPending: the node agent has not applied spec.network
	// yet, or no VM runs to apply it to (it applies when one starts).
	ReasonNetworkPending = "NetworkPending"
	// ReasonInvalidNetwork: spec.network is refused (ParseNetwork); no
	// pod is created or changed with it.
	ReasonInvalidNetwork = "InvalidNetwork"
)
