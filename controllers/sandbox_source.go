package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// resolvedSource is what a Sandbox's source gives its VM, or why it
// cannot start yet (Wait) or ever (Fail).
type resolvedSource struct {
	VM             sandlotv1.VMSpec
	Env            []sandlotv1.EnvVar
	TimeoutSeconds int32
	Data           dataSource
	Restore        restoreSource

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

func (r *SandboxReconciler) resolveSource(ctx context.Context, sbx *sandlotv1.Sandbox) (resolvedSource, error) {
	if sbx.Spec.Source.Snapshot != "" {
		return r.resolveSnapshot(ctx, sbx)
	}
	return r.resolveTemplate(ctx, sbx)
}

func (r *SandboxReconciler) resolveTemplate(ctx context.Context, sbx *sandlotv1.Sandbox) (resolvedSource, error) {
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
	vm := sandlotv1.VMSpec{Image: tpl.Spec.Image, Resources: tpl.Spec.Resources, WritableLayerMiB: tpl.Spec.WritableLayerMiB}
	if o := sbx.Spec.Resources; o != nil {
		if o.VCPU != 0 {
			vm.Resources.VCPU = o.VCPU
		}
		if o.MemoryMiB != 0 {
			vm.Resources.MemoryMiB = o.MemoryMiB
		}
	}
	// Base snapshots arrive with the templates issue: until then a
	// template's sandboxes boot its image cold on any eligible node.
	return resolvedSource{VM: vm, Env: mergeEnv(tpl.Spec.Env, sbx.Spec.Env), TimeoutSeconds: tpl.Spec.TimeoutSeconds}, nil
}

func (r *SandboxReconciler) resolveSnapshot(ctx context.Context, sbx *sandlotv1.Sandbox) (resolvedSource, error) {
	snap := &sandlotv1.Snapshot{}
	key := types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Spec.Source.Snapshot}
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
		return failing(sandlotv1.ReasonSourceFailed, "snapshot %q failed: %s", snap.Name, dataMessage(snap.Status.DataStatus)), nil
	case snap.Status.Phase != sandlotv1.DataReady:
		return waiting(sandlotv1.ReasonSourceNotReady, "snapshot %q is not ready yet (phase %q)", snap.Name, snap.Status.Phase), nil
	}
	vm := snap.Status.VM
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
		Restore: restoreSource{Kind: "Snapshot", Name: snap.Name, UID: string(snap.UID),
			Location: snap.Status.Location},
	}, nil
}

// templateTimeout is a template's default timeout, or the global default
// when the template is gone.
func (r *SandboxReconciler) templateTimeout(ctx context.Context, ns, name string) int32 {
	tpl := &sandlotv1.Template{}
	if name == "" || r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, tpl) != nil || tpl.Spec.TimeoutSeconds == 0 {
		return sandlotv1.DefaultTimeoutSeconds
	}
	return tpl.Spec.TimeoutSeconds
}

// snapshotData is where data lives and whether other nodes may use it.
func snapshotData(st sandlotv1.DataStatus) dataSource {
	return dataSource{Node: st.NodeName, Remote: st.RemoteStatus == sandlotv1.RemoteReady, Fingerprint: st.Fingerprint.Key()}
}
