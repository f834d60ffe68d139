package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// TemplateBuild is what a builder VM runs between its boot from
// spec.image and the base snapshot: E2B's template build steps. The node
// agent on the builder's node runs them through the guest agent, in
// order, then the start command, then waits for the ready command; the
// base snapshot is taken with the start command running.
type TemplateBuild struct {
	// ID names this build (E2B's buildID); a new ID with the same steps
	// is the same base (a cache hit) unless Force is set.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9-]*$`
	// +optional
	ID string `json:"id,omitempty"`
	// Steps run in order; ENV, WORKDIR and USER apply to the steps after
	// them and to the start command.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Steps []BuildStep `json:"steps,omitempty"`
	// StartCmd runs in the background once the steps are done, and keeps
	// running in every sandbox restored from the base.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	StartCmd string `json:"startCmd,omitempty"`
	// ReadyCmd is polled (every second) after the start command until it
	// exits 0; the base is taken then. Empty: ready at once.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	ReadyCmd string `json:"readyCmd,omitempty"`
	// Force builds again even when an identical build exists.
	// +optional
	Force bool `json:"force,omitempty"`
}

// BuildStepType is one of E2B's template instructions.
// +kubebuilder:validation:Enum=RUN;COPY;ENV;WORKDIR;USER
type BuildStepType string

const (
	StepRun     BuildStepType = "RUN"
	StepCopy    BuildStepType = "COPY"
	StepEnv     BuildStepType = "ENV"
	StepWorkdir BuildStepType = "WORKDIR"
	StepUser    BuildStepType = "USER"
)

// BuildStep is one instruction, with E2B's arguments:
// RUN [command, user?]; COPY [src, dest, user?, mode?] with FilesHash;
// ENV [name, value, ...]; WORKDIR [path]; USER [name].
// +kubebuilder:validation:XValidation:rule="self.type != 'COPY' || size(self.filesHash) > 0",message="a COPY step needs filesHash: the uploaded files it copies"
type BuildStep struct {
	Type BuildStepType `json:"type"`
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MaxLength=16384
	// +listType=atomic
	// +optional
	Args []string `json:"args,omitempty"`
	// FilesHash names a COPY step's files: the ConfigMap
	// BuildFilesName(FilesHash) in the template's namespace holds them as
	// a (gzipped) tar under BuildFilesKey.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{0,64}$`
	// +optional
	FilesHash string `json:"filesHash,omitempty"`
	// Force runs this step (and the ones after it) again even when cached.
	// +optional
	Force bool `json:"force,omitempty"`
}

// Build files and logs live in ConfigMaps in the template's namespace.
const (
	// BuildFilesKey is the binaryData key of a COPY step's tar.
	BuildFilesKey = "files.tar"
	// BuildLogKey is the data key of a build log: one JSON object per
	// line, {"t": RFC 3339 time, "level": ..., "msg": ..., "step": n}.
	BuildLogKey = "log"
	// LabelBuildLog marks a build log ConfigMap with its Template's name.
	LabelBuildLog = "sandlot.dev/build-log"
	// LabelBuildFiles marks a COPY step's files ConfigMap with the
	// template it was uploaded for.
	LabelBuildFiles = "sandlot.dev/build-files"
	// AnnotationFilesHash is the whole hash of the files a ConfigMap holds.
	AnnotationFilesHash = "sandlot.dev/files-hash"
)

// BuildFilesName is the ConfigMap holding the files of hash.
func BuildFilesName(hash string) string {
	if len(hash) > 40 {
		hash = hash[:40]
	}
	return "sandlot-files-" + hash
}

// BuildLogName is the ConfigMap holding a builder sandbox's build log.
func BuildLogName(builder string) string { return builder + "-log" }

// ConditionBuilt: the build steps of a template's builder sandbox ran
// (owned by the node agent, like VMReady): True once the start command
// is ready, False with the failing step's output.
const ConditionBuilt = "Built"

// Reasons of ConditionBuilt.
const (
	ReasonBuildRunning    = "BuildRunning"
	ReasonBuildSucceeded  = "BuildSucceeded"
	ReasonBuildStepFailed = "BuildStepFailed"
	// ReasonBuildCheckpoint: the node agent waits, after the step in the
	// builder's status.buildCheckpoint, for the Template controller's
	// checkpoint Snapshot of the builder (the step cache).
	ReasonBuildCheckpoint = "BuildCheckpoint"
)

// SandboxEnv is the env every sandbox of the template gets: spec.env,
// then the build's ENV steps in order (a later value of a name wins).
func (s *TemplateSpec) SandboxEnv() []EnvVar {
	if s.Build == nil {
		return s.Env
	}
	var steps []EnvVar
	for _, st := range s.Build.Steps {
		for i := 0; st.Type == StepEnv && i+1 < len(st.Args); i += 2 {
			steps = append(steps, EnvVar{Name: st.Args[i], Value: st.Args[i+1]})
		}
	}
	return MergeEnv(s.Env, steps)
}

// MergeEnv overlays over on base, keeping the order of first appearance.
func MergeEnv(base, over []EnvVar) []EnvVar {
	idx := map[string]int{}
	out := make([]EnvVar, 0, len(base)+len(over))
	for _, e := range append(append([]EnvVar{}, base...), over...) {
		if i, ok := idx[e.Name]; ok {
			out[i] = e
			continue
		}
		idx[e.Name] = len(out)
		out = append(out, e)
	}
	return out
}

// The step cache: after each step that changes the guest (RUN, COPY,
// WORKDIR) the builder is snapshotted (a checkpoint, owned by the
// Template, named by everything the guest's state then depends on); a
// later build restores its builder from the last checkpoint whose steps
// are unchanged and runs only the steps after it.
const (
	// AnnotationBuildFromStep on a builder Sandbox: it restores the
	// checkpoint AnnotationBuildCheckpoint, which holds the guest after
	// this many steps; the node agent runs the steps after them.
	AnnotationBuildFromStep   = "sandlot.dev/build-from-step"
	AnnotationBuildCheckpoint = "sandlot.dev/build-checkpoint"
	// LabelBuildCheckpoint marks a checkpoint Snapshot with its Template.
	LabelBuildCheckpoint = "sandlot.dev/build-checkpoint"
)

// ChangesGuest is whether a step of this type changes the guest's disk or
// memory (ENV and USER only change how later steps run).
func (t BuildStepType) ChangesGuest() bool { return t != StepEnv && t != StepUser }

// BuildCheckpointName names the checkpoint of tpl's builder on node after
// step n (1-based, a step that ChangesGuest): a digest of the template
// (its UID, so a template made again under the name starts afresh), the
// VM the builder boots, the node and steps 1..n. A forced build, or a
// step forced at or before n, adds the build's ID: it runs again.
func BuildCheckpointName(tpl *Template, node string, n int) string {
	b := tpl.Spec.Build
	steps := make([]BuildStep, n)
	copy(steps, b.Steps[:n])
	id := ""
	for i := range steps {
		if steps[i].Force || b.Force {
			id = b.ID
		}
		steps[i].Force = false
	}
	raw, _ := json.Marshal(struct {
		UID, Node, Image, ID string
		Resources            Resources
		WritableLayerMiB     int32
		Env                  []EnvVar
		Steps                []BuildStep
	}{string(tpl.UID), node, tpl.Spec.Image, id, tpl.Spec.Resources, tpl.Spec.WritableLayerMiB, tpl.Spec.Env, steps})
	sum := sha256.Sum256(raw)
	name := tpl.Name
	if len(name) > 36 {
		name = name[:36]
	}
	return name + "-step-" + hex.EncodeToString(sum[:6])
}

// AnnotationBuildDigest on a builder Sandbox is BuildDigest of the build
// it was created for: the node agent runs only that build.
const AnnotationBuildDigest = "sandlot.dev/build-digest"

// BuildDigest digests a build as the builder runs it.
func BuildDigest(b *TemplateBuild) string {
	raw, _ := json.Marshal(b)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}
