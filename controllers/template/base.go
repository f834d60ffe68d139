package template

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/data"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
)

// A template's base snapshot is built on each eligible node the way a
// user would build it: a builder Sandbox (owned by the Template, annotated
// so it boots the image cold on that node with the template's readiness
// probe) runs until its pod is Ready, a Snapshot of it (owned by the
// Template, same name) is taken, and the builder goes. A spec change
// (generation) builds again; an older base stays until the new one is
// Ready (its deletion then waits for the sandboxes restored from it).

// builderWorld is what one node's build step looks at.
type builderWorld struct {
	Entry   *sandlotv1.BaseSnapshot // this generation's, or nil
	Builder *sandlotv1.Sandbox      // nil when absent
	Pod     *corev1.Pod             // the builder's pod, nil when absent
	Snap    *sandlotv1.Snapshot     // nil when absent
	Probe   time.Duration           // how long the probe may take after the VM started
	Now     time.Time
	// Build: the template has build steps; the builder is snapshotted only
	// once the node agent reports them done (Built, nil until it starts).
	Build bool
	Built *metav1.Condition
	Steps []sandlotv1.BuildStep // the build's steps, for its checkpoints
	// Replaces is the guest of the node's Ready base of this revision
	// when the node's guest changed (an upgrade): it serves until this
	// one is Ready.
	Replaces string
}

// buildTimeout bounds a builder's steps, start and ready commands.
const buildTimeout = time.Hour

// buildStep is what to do next for one node.
type buildStep struct {
	CreateBuilder, CreateSnapshot, DeleteBuilder bool
	// DeleteSnapshot: a failed attempt's Snapshot goes before the next
	// attempt's builder (they share the name).
	DeleteSnapshot bool
	// Checkpoint is the build step after which to snapshot the builder
	// (the step cache), 0 for none.
	Checkpoint int
	Entry      sandlotv1.BaseSnapshot // the node's new status entry
}

// decideBuild is a node's build as a pure function of what exists.
func decideBuild(w builderWorld, entry sandlotv1.BaseSnapshot) buildStep {
	if w.Entry != nil && w.Entry.Phase == sandlotv1.BaseReady {
		if w.Snap != nil && w.Snap.DeletionTimestamp == nil {
			return buildStep{Entry: *w.Entry, DeleteBuilder: w.Builder != nil}
		}
		return rebuildDeleted(w, entry)
	}
	if w.Entry != nil && w.Entry.Phase == sandlotv1.BaseFailed {
		return decideRetry(w)
	}
	entry.Attempts = attemptOf(w.Entry)
	building := func(msg string) buildStep {
		entry.Phase, entry.Reason, entry.Message = sandlotv1.BaseBuilding, sandlotv1.ReasonBuilding, msg
		if w.Replaces != "" {
			entry.Reason = sandlotv1.ReasonGuestChanged
			entry.Message = fmt.Sprintf("the node's guest changed (%s to %s): %s; the base of guest %s serves meanwhile",
				cmp.Or(w.Replaces, "unrecorded"), entry.Guest, msg, cmp.Or(w.Replaces, "unrecorded"))
		}
		return buildStep{Entry: entry}
	}
	failed := func(reason, msg string) buildStep {
		return buildStep{Entry: failedEntry(entry, reason, msg, w.Now), DeleteBuilder: w.Builder != nil}
	}
	if w.Snap != nil {
		return snapshotStep(w, entry, building, failed)
	}
	if w.Builder == nil {
		return buildStep{CreateBuilder: true, Entry: building("booting the image").Entry}
	}
	if w.Builder.Status.Phase.Terminal() {
		return failed(builderFailure(w.Builder, w.Pod))
	}
	if w.Pod == nil {
		return building("waiting for the builder's pod")
	}
	if reason, msg, ok := imageMissing(w.Pod, entry.Node); ok {
		return failed(reason, msg)
	}
	if w.Build && (w.Built != nil || podReady(w.Pod)) {
		// Once the agent runs the steps, the probe no longer decides: a
		// guest busy building may miss a few.
		return decideSteps(w, building, failed)
	}
	if podReady(w.Pod) {
		return buildStep{CreateSnapshot: true, Entry: building("the probe passed: snapshotting").Entry}
	}
	if started := w.Builder.Status.StartedAt; started != nil && w.Now.Sub(started.Time) > w.Probe {
		return failed(sandlotv1.ReasonProbeTimeout, fmt.Sprintf("the readiness probe did not pass within %v of the VM starting", w.Probe))
	}
	return building("waiting for the readiness probe")
}

// snapshotStep is a node's build once its base Snapshot exists.
func snapshotStep(w builderWorld, entry sandlotv1.BaseSnapshot, building func(string) buildStep, failed func(string, string) buildStep) buildStep {
	if w.Snap.DeletionTimestamp != nil {
		// The old base, held by what restored from it, not this build's
		// (TestHeal found it called Ready again the reconcile after).
		return rebuildDeleted(w, entry)
	}
	switch w.Snap.Status.Phase {
	case sandlotv1.DataReady:
		entry.Phase, entry.Reason, entry.Message = sandlotv1.BaseReady, sandlotv1.ReasonBaseReady,
			fmt.Sprintf("snapshot %s on %s", w.Snap.Name, entry.Node)
		entry.RemoteStatus = w.Snap.Status.RemoteStatus
		return buildStep{Entry: entry, DeleteBuilder: w.Builder != nil}
	case sandlotv1.DataFailed:
		reason := sandlotv1.ReasonBuildFailed
		if sourceGone(w.Snap) {
			reason = sandlotv1.ReasonBuilderLost // the builder went under it: built again
		}
		return failed(reason, "snapshot of the builder failed: "+data.DataMessage(w.Snap.Status.DataStatus))
	}
	return building("snapshotting the builder")
}

// imageMissing says whether the builder's image could not be had, and
// why: InvalidImage (no later attempt can pass) or ImageMissing.
func imageMissing(pod *corev1.Pod, node string) (reason, msg string, ok bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Waiting != nil && podspec.ImageMissingReasons[cs.State.Waiting.Reason] {
			reason := sandlotv1.ReasonImageMissing
			if cs.State.Waiting.Reason == "InvalidImageName" {
				reason = sandlotv1.ReasonInvalidImage
			}
			return reason, podspec.ImageFailure(cs.Image, node, cs.State.Waiting.Reason), true
		}
	}
	return "", "", false
}

// rebuildDeleted: a Ready base whose Snapshot was deleted is no base:
// new sandboxes wait instead of restoring from what is going, and it is
// built again (same name) once the Snapshot is gone — its deletion may
// wait for the sandboxes restored from it.
func rebuildDeleted(w builderWorld, entry sandlotv1.BaseSnapshot) buildStep {
	entry.Phase, entry.Reason = sandlotv1.BaseBuilding, sandlotv1.ReasonBaseSnapshotDeleted
	if w.Snap != nil {
		entry.Message = fmt.Sprintf("base snapshot %s is being deleted: building it again once it is gone", entry.Snapshot)
		return buildStep{Entry: entry}
	}
	entry.Message = fmt.Sprintf("base snapshot %s was deleted: building it again", entry.Snapshot)
	return buildStep{Entry: entry, CreateBuilder: w.Builder == nil}
}

// decideSteps follows the node agent's run of the build steps in a ready
// builder: the snapshot once they are done, the failing step's output
// as the base's message when one fails.
func decideSteps(w builderWorld, building func(string) buildStep, failed func(string, string) buildStep) buildStep {
	c := w.Built
	switch {
	case c != nil && c.Status == metav1.ConditionTrue:
		return buildStep{CreateSnapshot: true, Entry: building("the build is done: snapshotting").Entry}
	case c != nil && c.Reason == sandlotv1.ReasonBuildStepFailed:
		return failed(sandlotv1.ReasonBuildFailed, c.Message)
	case c != nil && c.Reason == sandlotv1.ReasonBuildCheckpoint && checkpointable(w.Steps, int(w.Builder.Status.BuildCheckpoint)):
		n := int(w.Builder.Status.BuildCheckpoint)
		return buildStep{Checkpoint: n, Entry: building(fmt.Sprintf("checkpointing the builder after step %d", n)).Entry}
	}
	if started := w.Builder.Status.StartedAt; started != nil && w.Now.Sub(started.Time) > w.Probe+buildTimeout {
		return failed(sandlotv1.ReasonBuildFailed, fmt.Sprintf("the build did not finish within %v", buildTimeout))
	}
	if c != nil {
		return building(c.Message)
	}
	return building("waiting for the node agent to run the build steps")
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// probeTimeout is how long a builder may take to pass its probe.
func probeTimeout(tpl *sandlotv1.Template) time.Duration {
	if p := tpl.Spec.ReadinessProbe; p != nil && p.TimeoutSeconds > 0 {
		return time.Duration(p.TimeoutSeconds) * time.Second
	}
	return 120 * time.Second
}

// revisions memoizes baseRevision per template UID and generation (its
// spec's version): a template reconcile reads it per node and entry.
var revisions sync.Map // revisionKey → string

type revisionKey struct {
	uid types.UID
	gen int64
}

// BaseRevision digests what a base snapshot is built from: the VM, the
// probe that decides when to take it, and the env its guest booted with.
func BaseRevision(tpl *sandlotv1.Template) string {
	if tpl.UID == "" || tpl.Generation == 0 {
		return digestRevision(tpl) // not from the API server: no version to key it by
	}
	k := revisionKey{tpl.UID, tpl.Generation}
	if v, ok := revisions.Load(k); ok {
		return v.(string)
	}
	rev := digestRevision(tpl)
	revisions.Store(k, rev)
	return rev
}

func digestRevision(tpl *sandlotv1.Template) string {
	b, _ := json.Marshal(struct {
		Image            string
		Resources        sandlotv1.Resources
		WritableLayerMiB int32
		Probe            *sandlotv1.ReadinessProbe
		Env              []sandlotv1.EnvVar
		Build            *sandlotv1.TemplateBuild `json:",omitempty"`
	}{tpl.Spec.Image, tpl.Spec.Resources, tpl.Spec.WritableLayerMiB, BuilderProbe(tpl), tpl.Spec.Env, buildKey(tpl.Spec.Build)})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:4])
}

// buildKey is what of a build makes its base: the steps, commands and
// files, not its ID — unless forced, so an unchanged build reuses the
// base (E2B's cache hit) and a forced one makes a new one.
func buildKey(b *sandlotv1.TemplateBuild) *sandlotv1.TemplateBuild {
	if b == nil {
		return nil
	}
	k := b.DeepCopy()
	forced := k.Force
	for i := range k.Steps {
		forced = forced || k.Steps[i].Force
		k.Steps[i].Force = false
	}
	if !forced {
		k.ID = ""
	}
	k.Force = false
	return k
}

// baseName names a node's builder Sandbox and base Snapshot for a
// revision and the node's guest: a DNS label, stable across reconciles.
// The template's UID is in it: a template deleted and made again under
// its name never takes the previous one's objects (still going away)
// for its own. A node without a published guest names as before guests
// were recorded.
func baseName(tpl *sandlotv1.Template, node, guest string) string {
	key := string(tpl.UID) + "/" + node
	if guest != "" {
		key += "/" + guest
	}
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s-base-%s-%s", shortName(tpl.Name), BaseRevision(tpl), hex.EncodeToString(sum[:3]))
}

// buildNode carries out one node's build step and returns its entry.
func (r *Reconciler) buildNode(ctx context.Context, tpl *sandlotv1.Template, n *corev1.Node) (sandlotv1.BaseSnapshot, error) {
	node, guest := n.Name, n.Annotations[sandlotv1.AnnotationGuest]
	name := baseName(tpl, node, guest)
	w := builderWorld{Probe: probeTimeout(tpl), Now: time.Now(), Build: tpl.Spec.Build != nil}
	if w.Build {
		w.Steps = tpl.Spec.Build.Steps
	}
	for i := range tpl.Status.BaseSnapshots {
		b := &tpl.Status.BaseSnapshots[i]
		switch {
		case b.Node != node || b.Revision != BaseRevision(tpl):
		case b.Guest == guest:
			w.Entry = b
		case b.Phase == sandlotv1.BaseReady:
			w.Replaces = b.Guest
		}
	}
	key := types.NamespacedName{Namespace: tpl.Namespace, Name: name}
	var err error
	if w.Builder, err = getOrNil(ctx, r.Client, key, &sandlotv1.Sandbox{}); err != nil {
		return sandlotv1.BaseSnapshot{}, err
	}
	if w.Builder != nil {
		w.Built = meta.FindStatusCondition(w.Builder.Status.Conditions, sandlotv1.ConditionBuilt)
	}
	if w.Builder != nil && w.Builder.Status.PodName != "" {
		if w.Pod, err = getOrNil(ctx, r.Client, types.NamespacedName{Namespace: tpl.Namespace, Name: w.Builder.Status.PodName}, &corev1.Pod{}); err != nil {
			return sandlotv1.BaseSnapshot{}, err
		}
	}
	if w.Snap, err = getOrNil(ctx, r.Client, key, &sandlotv1.Snapshot{}); err != nil {
		return sandlotv1.BaseSnapshot{}, err
	}
	step := decideBuild(w, sandlotv1.BaseSnapshot{Node: node, Revision: BaseRevision(tpl), Guest: guest, Snapshot: name})
	switch {
	case step.CreateBuilder:
		var from builderFrom
		if from, err = r.lastCheckpoint(ctx, tpl, node); err == nil {
			err = r.Create(ctx, builderSandbox(tpl, node, name, from))
		}
	case step.Checkpoint > 0:
		err = r.Create(ctx, checkpointSnapshot(tpl, node, step.Checkpoint, name))
	case step.CreateSnapshot:
		err = r.Create(ctx, &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tpl.Namespace,
			OwnerReferences: []metav1.OwnerReference{templateOwner(tpl)}},
			Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: name}}})
	case step.DeleteBuilder:
		err = client.IgnoreNotFound(r.Delete(ctx, w.Builder))
	case step.DeleteSnapshot:
		err = client.IgnoreNotFound(r.Delete(ctx, w.Snap))
	}
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	return step.Entry, err
}

// builderSandbox boots the template's image cold on node, or restores
// the checkpoint from names.
func builderSandbox(tpl *sandlotv1.Template, node, name string, from builderFrom) *sandlotv1.Sandbox {
	timeout := int32(probeTimeout(tpl)/time.Second) + 600
	if tpl.Spec.Build != nil {
		timeout += int32(buildTimeout / time.Second)
	}
	ann := map[string]string{sandlotv1.AnnotationBaseOf: tpl.Name, sandlotv1.AnnotationBuildNode: node}
	if tpl.Spec.Build != nil {
		ann[sandlotv1.AnnotationBuildDigest] = sandlotv1.BuildDigest(tpl.Spec.Build)
	}
	if from.Checkpoint != "" {
		ann[sandlotv1.AnnotationBuildFromStep] = strconv.Itoa(from.Step)
		ann[sandlotv1.AnnotationBuildCheckpoint] = from.Checkpoint
	}
	return &sandlotv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tpl.Namespace,
			Annotations:     ann,
			OwnerReferences: []metav1.OwnerReference{templateOwner(tpl)}},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: tpl.Name}, TimeoutSeconds: ptr.To(timeout)},
	}
}

func templateOwner(tpl *sandlotv1.Template) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: sandlotv1.GroupVersion.String(), Kind: "Template", Name: tpl.Name,
		UID: tpl.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// getOrNil gets key into obj, or returns nil when it does not exist.
func getOrNil[T client.Object](ctx context.Context, c client.Client, key types.NamespacedName, obj T) (T, error) {
	var zero T
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return zero, nil
		}
		return zero, fmt.Errorf("get %s: %w", key, err)
	}
	return obj, nil
}

// baseCondition summarizes the nodes' entries of this generation.
func baseCondition(entries []sandlotv1.BaseSnapshot, rev string, eligible int) (metav1.ConditionStatus, string, string) {
	var ready, building []string
	var failed *sandlotv1.BaseSnapshot
	for i, e := range entries {
		if e.Revision != rev {
			continue
		}
		switch e.Phase {
		case sandlotv1.BaseReady:
			ready = append(ready, e.Node)
		case sandlotv1.BaseBuilding:
			building = append(building, e.Node)
		case sandlotv1.BaseFailed:
			failed = &entries[i]
		}
	}
	switch {
	case len(ready) > 0:
		return metav1.ConditionTrue, sandlotv1.ReasonBaseReady, fmt.Sprintf("base snapshot Ready on %d of %d nodes %v", len(ready), eligible, ready)
	case failed != nil && len(building) == 0:
		return metav1.ConditionFalse, failed.Reason, "on " + failed.Node + ": " + failed.Message
	case eligible == 0:
		return metav1.ConditionFalse, sandlotv1.ReasonNoEligibleNode, "no Ready, schedulable node labelled " + sandlotv1.LabelRuntime + "=true to build on"
	}
	msg := "building"
	for _, e := range entries {
		if e.Revision == rev && e.Phase == sandlotv1.BaseBuilding {
			msg = "on " + e.Node + ": " + e.Message
			break
		}
	}
	return metav1.ConditionFalse, sandlotv1.ReasonBuilding, msg
}

// dropOldBases deletes the Snapshots of older revisions, and of older
// guests, on nodes whose current base is Ready (deletion waits for the
// sandboxes using them) and keeps only the entries still worth showing.
func (r *Reconciler) dropOldBases(ctx context.Context, tpl *sandlotv1.Template, current map[string]sandlotv1.BaseSnapshot) ([]sandlotv1.BaseSnapshot, error) {
	var keep []sandlotv1.BaseSnapshot
	for _, b := range tpl.Status.BaseSnapshots {
		cur, ok := current[b.Node]
		if b.Revision == BaseRevision(tpl) && (!ok || cur.Snapshot == b.Snapshot) {
			continue // replaced by current
		}
		if ok && cur.Phase == sandlotv1.BaseReady {
			snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: b.Snapshot, Namespace: tpl.Namespace}}
			if err := r.Delete(ctx, snap); client.IgnoreNotFound(err) != nil {
				return nil, fmt.Errorf("delete old base snapshot %s: %w", b.Snapshot, err)
			}
			continue
		}
		keep = append(keep, b) // until this generation's is Ready there
	}
	return keep, nil
}

// setBaseCondition records the summary as the BaseSnapshotReady condition.
func setBaseCondition(st *sandlotv1.TemplateStatus, rev string, gen int64, eligible int) {
	status, reason, msg := baseCondition(st.BaseSnapshots, rev, eligible)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sandlotv1.ConditionBaseSnapshotReady, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: gen})
}
