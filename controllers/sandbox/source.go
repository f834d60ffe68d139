package sandbox

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/data"
	"github.com/sandlot-dev/sandlot/controllers/index"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/template"
)

// resolvedSource is what a Sandbox's source gives its VM, or why it
// cannot start yet (Wait) or ever (Fail).
type resolvedSource struct {
	VM             sandlotv1.VMSpec
	Env            []sandlotv1.EnvVar
	TimeoutSeconds int32
	Data           placement.DataSource
	// Restore is the data to restore on any node; PerNode, a template's
	// base snapshot on each node that has one (preferred there).
	Restore sandlotv1.RestoreRef
	PerNode map[string]sandlotv1.RestoreRef
	// Probe is a builder sandbox's readiness probe (its template's).
	Probe *sandlotv1.ReadinessProbe
	// BaseRevision is the template's base revision, for a sandbox of
	// one: its warm pool pods of that revision may be claimed.
	BaseRevision string
	// WarmPool is the template's pool size per node (spec.warmPool).
	WarmPool int32
	// Template is the template the VM comes from (its image and size):
	// its warm pool pods may host the restore of Restore in place.
	Template string
	// PullSecrets are the template's image pull Secrets.
	PullSecrets []corev1.LocalObjectReference

	Wait, Fail bool
	Reason     string
	Message    string
}

func waiting(reason, format string, args ...any) resolvedSource {
	return resolvedSource{Wait: true, Reason: reason, Message: fmt.Sprintf(format, args...),
		TimeoutSeconds: sandlotv1.DefaultTimeoutSeconds}
}

func failing(reason, format string, args ...any) resolvedSource {
	return resolvedSource{Fail: true, Reason: reason, Message: fmt.Sprintf(format, args...),
		TimeoutSeconds: sandlotv1.DefaultTimeoutSeconds}
}

// sourceName renders a source for display: "template/x" or "snapshot/y".
func sourceName(src sandlotv1.SandboxSource) string {
	if src.Snapshot != "" {
		return "snapshot/" + src.Snapshot
	}
	return "template/" + src.Template
}

func (r *Reconciler) resolveSource(ctx context.Context, sbx *sandlotv1.Sandbox) (resolvedSource, error) {
	if name := sbx.Status.RestoringFrom; name != "" { // its node was lost (nodelost.go)
		return r.resolveSnapshot(ctx, sbx, name)
	}
	if sbx.Spec.Source.Snapshot != "" {
		return r.resolveSnapshot(ctx, sbx, sbx.Spec.Source.Snapshot)
	}
	return r.resolveTemplate(ctx, sbx)
}

func (r *Reconciler) resolveTemplate(ctx context.Context, sbx *sandlotv1.Sandbox) (resolvedSource, error) {
	tpl := &sandlotv1.Template{}
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Spec.Source.Template}
	if err := r.Get(ctx, key, tpl); err != nil {
		if apierrors.IsNotFound(err) {
			return waiting(sandlotv1.ReasonSourceNotFound, "template %q not found", key.Name), nil
		}
		return resolvedSource{}, fmt.Errorf("get template %s: %w", key, err)
	}
	if c := meta.FindStatusCondition(tpl.Status.Conditions, sandlotv1.ConditionAccepted); c == nil ||
		c.Status != "True" || c.ObservedGeneration != tpl.Generation {
		msg := "template " + tpl.Name + " has not been accepted yet"
		if c != nil && c.Status == "False" {
			msg = "template " + tpl.Name + " is not accepted: " + c.Message
		}
		return waiting(sandlotv1.ReasonTemplateNotAccepted, "%s", msg), nil
	}
	src := resolvedSource{VM: sandlotv1.VMSpec{Image: tpl.Spec.Image, Resources: tpl.Spec.Resources, WritableLayerMiB: tpl.Spec.WritableLayerMiB,
		VolumeMounts: sbx.Spec.VolumeMounts},
		Env: sandlotv1.MergeEnv(tpl.Spec.SandboxEnv(), sbx.Spec.Env), TimeoutSeconds: tpl.Spec.TimeoutSeconds, BaseRevision: template.BaseRevision(tpl),
		WarmPool: tpl.Spec.WarmPool, Template: tpl.Name, PullSecrets: tpl.Spec.ImagePullSecrets}
	if sbx.Annotations[sandlotv1.AnnotationBaseOf] == tpl.Name {
		// The template's builder: the one sandbox of it that boots cold,
		// on the node it builds for.
		src.Data = placement.DataSource{Nodes: index.NonEmpty(sbx.Annotations[sandlotv1.AnnotationBuildNode])}
		src.Probe = template.BuilderProbe(tpl)
		return r.builderCheckpoint(ctx, sbx, tpl, src)
	}
	if o := sbx.Spec.Resources; o != nil && ((o.VCPU != 0 && o.VCPU != src.VM.Resources.VCPU) ||
		(o.MemoryMiB != 0 && o.MemoryMiB != src.VM.Resources.MemoryMiB)) {
		return failing(sandlotv1.ReasonInvalidSpec, "spec.resources (vcpu %d, memoryMiB %d) must match template %q (vcpu %d, memoryMiB %d): its sandboxes restore its base snapshot",
			o.VCPU, o.MemoryMiB, tpl.Name, src.VM.Resources.VCPU, src.VM.Resources.MemoryMiB), nil
	}
	return r.resolveBase(ctx, tpl, src)
}

// builderCheckpoint makes a builder that starts from a build step
// checkpoint restore it (on the node it builds for) instead of booting.
func (r *Reconciler) builderCheckpoint(ctx context.Context, sbx *sandlotv1.Sandbox, tpl *sandlotv1.Template, src resolvedSource) (resolvedSource, error) {
	name, node := sbx.Annotations[sandlotv1.AnnotationBuildCheckpoint], sbx.Annotations[sandlotv1.AnnotationBuildNode]
	if name == "" {
		return src, nil
	}
	snap := &sandlotv1.Snapshot{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: name}, snap); client.IgnoreNotFound(err) != nil {
		return resolvedSource{}, fmt.Errorf("get build checkpoint %s: %w", name, err)
	}
	if snap.Status.Phase != sandlotv1.DataReady || snap.DeletionTimestamp != nil || snap.Status.NodeName != node ||
		!metav1.IsControlledBy(snap, tpl) {
		return failing(sandlotv1.ReasonSourceFailed, "build checkpoint %q is gone or not Ready on %s: build the template again", name, node), nil
	}
	src.Restore = sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: snap.Name, UID: string(snap.UID), Location: snap.Status.Location}
	return src, nil
}

// resolveBase restores a template's sandbox from the template's Ready base
// snapshots of its current generation: on a node that holds one, that
// one; on another compatible node, one that is remote Ready.
func (r *Reconciler) resolveBase(ctx context.Context, tpl *sandlotv1.Template, src resolvedSource) (resolvedSource, error) {
	b, err := r.bases.Of(ctx, r.Client, tpl)
	if err != nil {
		return resolvedSource{}, err
	}
	src.PerNode, src.Data.Nodes = b.PerNode, b.Nodes
	if b.Remote {
		src.Data.Remote, src.Data.Fingerprint, src.Restore = true, b.Fingerprint, b.Restore
	}
	if len(src.PerNode) == 0 {
		msg := "template " + tpl.Name + " has no Ready base snapshot yet"
		if c := meta.FindStatusCondition(tpl.Status.Conditions, sandlotv1.ConditionBaseSnapshotReady); c != nil {
			msg += ": " + c.Message
		}
		return waiting(sandlotv1.ReasonBaseSnapshotNotReady, "%s", msg), nil
	}
	return src, nil
}

// restoreFor is what a pod on node restores (zero: a cold boot).
func (s resolvedSource) restoreFor(node string) sandlotv1.RestoreRef {
	if rs, ok := s.PerNode[node]; ok {
		return rs
	}
	return s.Restore
}

// resolveSnapshot is snapshot name of the sandbox's namespace as its
// source: spec.source's, or the one it is restored from after its node
// was lost.
func (r *Reconciler) resolveSnapshot(ctx context.Context, sbx *sandlotv1.Sandbox, name string) (resolvedSource, error) {
	snap := &sandlotv1.Snapshot{}
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: name}
	if err := r.Get(ctx, key, snap); err != nil {
		if apierrors.IsNotFound(err) {
			return waiting(sandlotv1.ReasonSourceNotFound, "snapshot %q not found", key.Name), nil
		}
		return resolvedSource{}, fmt.Errorf("get snapshot %s: %w", key, err)
	}
	switch {
	case snap.DeletionTimestamp != nil:
		return failing(sandlotv1.ReasonSourceFailed, "snapshot %q is being deleted", snap.Name), nil
	case snap.Status.Phase == sandlotv1.DataFailed:
		return failing(sandlotv1.ReasonSourceFailed, "snapshot %q failed: %s", snap.Name, data.DataMessage(snap.Status.DataStatus)), nil
	case snap.Status.Phase != sandlotv1.DataReady:
		return waiting(sandlotv1.ReasonSourceNotReady, "snapshot %q is not ready yet (phase %q)", snap.Name, snap.Status.Phase), nil
	}
	vm := snap.Status.VM
	if len(sbx.Spec.VolumeMounts) > 0 { // else the snapshot's own
		vm.VolumeMounts = sbx.Spec.VolumeMounts
	}
	if o := sbx.Spec.Resources; o != nil && ((o.VCPU != 0 && o.VCPU != vm.Resources.VCPU) ||
		(o.MemoryMiB != 0 && o.MemoryMiB != vm.Resources.MemoryMiB)) {
		return failing(sandlotv1.ReasonInvalidSpec, "spec.resources (vcpu %d, memoryMiB %d) must match snapshot %q (vcpu %d, memoryMiB %d)",
			o.VCPU, o.MemoryMiB, snap.Name, vm.Resources.VCPU, vm.Resources.MemoryMiB), nil
	}
	return resolvedSource{
		VM:             vm,
		Env:            sbx.Spec.Env,
		TimeoutSeconds: r.templateTimeout(ctx, sbx.Namespace, snap.Status.Template),
		Data:           snapshotData(snap.Status.DataStatus),
		Template:       snap.Status.Template,
		Restore: sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: snap.Name, UID: string(snap.UID),
			Location: snap.Status.Location},
	}, nil
}

// templateTimeout is a template's default timeout, or the global default
// when the template is gone.
func (r *Reconciler) templateTimeout(ctx context.Context, ns, name string) int32 {
	tpl := &sandlotv1.Template{}
	if name == "" || r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, tpl) != nil || tpl.Spec.TimeoutSeconds == 0 {
		return sandlotv1.DefaultTimeoutSeconds
	}
	return tpl.Spec.TimeoutSeconds
}

// snapshotData is where data lives and whether other nodes may use it.
func snapshotData(st sandlotv1.DataStatus) placement.DataSource {
	return placement.DataSource{Nodes: index.NonEmpty(st.NodeName), Remote: st.RemoteStatus == sandlotv1.RemoteReady, Fingerprint: st.Fingerprint.Key()}
}
