package v1alpha1

// Labels.
const (
	// LabelNode marks a per-node object (Snapshot, PausedSandbox, pool pod)
	// with the node whose agent must act on it.
	LabelNode = "sandlot.dev/node"
	// LabelRuntime marks nodes that can run sandlot sandboxes ("true").
	LabelRuntime = "sandlot.dev/runtime"
	// LabelSandbox names the Sandbox that owns a Pod or Secret.
	LabelSandbox = "sandlot.dev/sandbox"
	// LabelSandboxID carries the E2B-style sandbox ID on a Sandbox's Pod.
	LabelSandboxID = "sandlot.dev/sandbox-id"
	// LabelPool marks a warm pool pod with its Template's name; an
	// unclaimed one has LabelSandbox "" (so caches of sandbox pods see it),
	// a claimed one the claiming Sandbox's name.
	LabelPool = "sandlot.dev/pool"
	// LabelBaseRevision is the revision of the template base snapshot a
	// pool pod restores (BaseSnapshot.Revision).
	LabelBaseRevision = "sandlot.dev/base-revision"
	// LabelBaseGuest is the guest (AnnotationGuest) of the base a pool
	// pod restores (BaseSnapshot.Guest): a pool of an older guest rolls.
	LabelBaseGuest = "sandlot.dev/base-guest"
	// LabelFingerprint is set on a node (by its agent) to the CPU/kernel
	// fingerprint a snapshot must match to be restored there.
	LabelFingerprint = "sandlot.dev/fingerprint"
	// LabelPublic ("true") publishes a Template to every team the E2B API
	// serves: each team's creates copy it into the team's namespace.
	LabelPublic = "sandlot.dev/public"
)

// Pod annotations: they tell the shim what to boot or restore.
const (
	// AnnotationSandboxID is the sandbox ID the guest takes as its identity.
	AnnotationSandboxID = "sandlot.dev/sandbox-id"
	// AnnotationBoot is BootCold, BootRestore or BootSlot.
	AnnotationBoot = "sandlot.dev/boot"
	// AnnotationRestoreKind is "Snapshot" or "PausedSandbox" when restoring.
	AnnotationRestoreKind = "sandlot.dev/restore-kind"
	// AnnotationRestoreName names the Snapshot or PausedSandbox restored.
	AnnotationRestoreName = "sandlot.dev/restore-name"
	// AnnotationRestoreUID is the UID of the Snapshot or PausedSandbox
	// restored, so a resumed pod is told apart from a later pause's.
	AnnotationRestoreUID = "sandlot.dev/restore-uid"
	// AnnotationRestoreLocation is the store location of the data restored.
	AnnotationRestoreLocation = "sandlot.dev/restore-location"
	// AnnotationVCPU is the VM's vCPU count.
	AnnotationVCPU = "sandlot.dev/vcpu"
	// AnnotationMemoryMiB is the VM's memory in MiB.
	AnnotationMemoryMiB = "sandlot.dev/memory-mib"
	// AnnotationWritableLayerMiB is the size of the VM's writable disk layer.
	AnnotationWritableLayerMiB = "sandlot.dev/writable-layer-mib"
	// AnnotationPool tells the shim the pod is a warm pool pod: its VM is
	// paused once restored, until a claim.
	AnnotationPool = "sandlot.dev/pool"
	// AnnotationClaim, set with the claim, is the sandbox identity the node
	// agent pushes into a claimed pool pod's VM before resuming it (JSON
	// PoolClaim; the access token and env sealed to the node's key).
	AnnotationClaim = "sandlot.dev/claim"
	// AnnotationClaimActivated is set by the node agent to the claim it
	// carried out (equal to AnnotationClaim once the VM runs as the sandbox).
	AnnotationClaimActivated = "sandlot.dev/claim-activated"
	// AnnotationSealedIdentity, on a template builder's pod, is its envd
	// token sealed to its node's key (base64 of api/sealed's Seal): the
	// node agent runs the build's steps through envd with it.
	AnnotationSealedIdentity = "sandlot.dev/sealed-identity"
	// AnnotationMoveFrom, on a Sandbox, is set by the controller to the
	// cordoned node (a drain) it moves the sandbox off: the sandbox is
	// paused there and resumed on another node, same ID, memory and
	// files; removed once it runs elsewhere.
	AnnotationMoveFrom = "sandlot.dev/move-from"
	// AnnotationMoveBlocked says why a sandbox on a cordoned node cannot
	// move (its pod's disruption budget holds the drain meanwhile).
	AnnotationMoveBlocked = "sandlot.dev/move-blocked"
)

// Node annotations, each set by the node's agent on its own Node.
const (
	// AnnotationClaimKey is the public key (base64) the controller seals
	// a sandbox's token and env to for this node's agent (api/sealed):
	// the agent may read no Secret.
	AnnotationClaimKey = "sandlot.dev/claim-key"
	// AnnotationGuest is the digest of the guest this node boots VMs
	// with (its kernel and initramfs, the guest agent inside): a
	// template's base records the guest it captured, and a node whose
	// guest changed (an upgrade) gets its bases built again.
	AnnotationGuest = "sandlot.dev/guest"
)

// PoolClaim is AnnotationClaim's value.
type PoolClaim struct {
	Sandbox   string `json:"sandbox"`
	SandboxID string `json:"sandboxID"`
	// Env is read from claims a controller before this one wrote; the
	// env now travels in Sealed.
	Env map[string]string `json:"env,omitempty"`
	// Sealed is the sandbox's envd token and env (api/sealed.Identity)
	// sealed to the pod's node's AnnotationClaimKey, for the pod and
	// sandbox named (sealed.Context): only that node's agent opens it.
	Sealed []byte `json:"sealed,omitempty"`
	// Restore, when set, is the data the claiming sandbox restores (its
	// source Snapshot, or its PausedSandbox on a resume): the node agent
	// restores the pod's VM from it in place instead of resuming the
	// template's paused base, so the start skips the pod's start.
	Restore *RestoreRef `json:"restore,omitempty"`
}

// Sandbox annotations the Template controller sets on a builder Sandbox:
// it boots the template's image cold on that node (every other sandbox of
// a template restores its base snapshot) with the readiness probe.
const (
	AnnotationBaseOf    = "sandlot.dev/base-of"
	AnnotationBuildNode = "sandlot.dev/build-node"
)

// Values of AnnotationBoot.
const (
	BootCold    = "cold"
	BootRestore = "restore"
	// BootDisk: a cold boot on the restore source's disk, its memory
	// unread (RestoreRef.Boot; spec.resumeBy Boot).
	BootDisk = "disk"
	// BootSlot: a template's start slot — a pool pod whose shim runs no VM
	// until a claim restores the claimant's data into it.
	BootSlot = "slot"
)

// Finalizers.
const (
	// FinalizerSandboxVM holds a Sandbox until its Pod (and so its VM) is
	// gone, so nothing it maps is released while it still runs.
	FinalizerSandboxVM = "sandlot.dev/vm"
	// FinalizerInUse holds a Snapshot while any Sandbox restores from it
	// (owned by the controller).
	FinalizerInUse = "sandlot.dev/in-use"
	// FinalizerData holds a Snapshot or PausedSandbox while its data exists
	// in the store (owned by the node agent).
	FinalizerData = "sandlot.dev/data"
	// FinalizerTokenInUse holds a Sandbox's token Secret (TokenSecretName)
	// until the Sandbox goes (owned by the controller). The token's other
	// copy lives outside the cluster, in the running VM: a Secret deleted
	// by hand would leave clients without the only token the VM accepts.
	FinalizerTokenInUse = "sandlot.dev/token-in-use"
)

// Names of things outside this API that sandlot components agree on.
const (
	// RuntimeClassName is the RuntimeClass and CRI handler of sandlot pods.
	RuntimeClassName = "sandlot"
	// ContainerName is the name of the app container in a sandbox Pod.
	ContainerName = "sandbox"
	// TokenSecretKey is the key of the envd access token in a Sandbox's Secret.
	TokenSecretKey = "accessToken"
	// EnvSandboxID and EnvAccessToken are set in every sandbox Pod.
	EnvSandboxID   = "SANDLOT_SANDBOX_ID"
	EnvAccessToken = "SANDLOT_ACCESS_TOKEN"
	// DefaultTimeoutSeconds is a sandbox's lifetime when nothing sets one
	// (E2B's default).
	DefaultTimeoutSeconds = 300
	// EnvdPort and CodeInterpreterPort are the guest's service ports.
	EnvdPort            = 49983
	CodeInterpreterPort = 49999
)

// TokenSecretName is the name of the Secret holding a Sandbox's envd token.
func TokenSecretName(sandbox string) string { return sandbox + "-envd-token" }
