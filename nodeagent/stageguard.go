package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// The stage API hands a shim the data a pod restores: another tenant's
// VM memory if the pod's annotations name another namespace's Snapshot.
// The admission policy of the chart keeps those annotations the
// controller's; the agent checks again, since a policy can be off or
// bypassed and the data never leaves the node unless it says yes.

// errStageRefused marks a stage request the agent refuses (HTTP 403).
var errStageRefused = errors.New("stage request refused")

// stageRequest is a stage request as the agent reads it. A shim names the
// pod it restores for (from the CRI's sandbox annotations) and gets that
// pod checked; a request without it (a shim from before) passes only if
// every pod of this node that restores the data passes, since the agent
// cannot tell which of them asked.
type stageRequest = stageapi.StageRequest

// stageGuard decides whether a pod may have the data it asks for: the
// pod is on this node and belongs to a Sandbox (or, a warm pool pod, to
// a Template) of the data's namespace that the controller pointed at
// that very data. Pods and data are read past the cache (api): a pod
// created a moment ago, a Snapshot of another node (the cache holds this
// node's only). Sandboxes are read from the cache, and past it when it
// does not hold one: the cache holds the Sandboxes whose status places
// them on this node, which a pod's restore may come before (the status
// write naming the node follows the pod's creation or claim, and reaches
// the cache later still). A copy the cache holds has its UID checked
// against the pod's owner. The data's namespace, which keeps another
// tenant out, never comes from the cache.
type stageGuard struct {
	api, cache client.Reader
	node       string
}

// stageCheck is one request's check: the pods that restore one snapshot
// on a node (a warm pool, a template's sandboxes) share their data and
// template, read once, and the pods of one owner share their verdict.
type stageCheck struct {
	*stageGuard
	reads    map[string]readResult
	verdicts map[string]string
}

type readResult struct {
	obj client.Object
	err error
}

// authorize is nil when req may have its data, an errStageRefused error
// saying why not, or the error that kept the agent from telling.
func (g *stageGuard) authorize(ctx context.Context, req stageRequest) error {
	c := &stageCheck{stageGuard: g, reads: map[string]readResult{}, verdicts: map[string]string{}}
	if req.PodNamespace != "" || req.PodName != "" || req.PodUID != "" {
		pod, err := g.requester(ctx, req)
		if err != nil {
			return err
		}
		return c.check(ctx, pod, req.Kind, req.UID)
	}
	pods, err := g.podsRestoring(ctx, req.Kind, req.UID)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return fmt.Errorf("%w: no pod on node %s restores %s %s", errStageRefused, g.node, req.Kind, req.UID)
	}
	for i := range pods {
		if err := c.check(ctx, &pods[i], req.Kind, req.UID); err != nil {
			return err
		}
	}
	return nil
}

// requester is the pod the request names, the very one (its UID).
func (g *stageGuard) requester(ctx context.Context, req stageRequest) (*corev1.Pod, error) {
	if req.PodNamespace == "" || req.PodName == "" || req.PodUID == "" {
		return nil, fmt.Errorf("%w: the request names pod %s/%s (UID %q) only in part", errStageRefused,
			req.PodNamespace, req.PodName, req.PodUID)
	}
	pod := &corev1.Pod{}
	err := g.api.Get(ctx, types.NamespacedName{Namespace: req.PodNamespace, Name: req.PodName}, pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: pod %s/%s does not exist", errStageRefused, req.PodNamespace, req.PodName)
	case err != nil:
		return nil, fmt.Errorf("get pod %s/%s: %w", req.PodNamespace, req.PodName, err)
	case string(pod.UID) != req.PodUID:
		return nil, fmt.Errorf("%w: pod %s/%s has UID %s, the request's is %s", errStageRefused,
			req.PodNamespace, req.PodName, pod.UID, req.PodUID)
	}
	return pod, nil
}

// podsRestoring are this node's pods whose annotations restore the data:
// the ones that may have asked. Their metadata is all the check reads
// (the node is the selector's), and all that is listed: a node's every
// pod in full, at each restore, would cost the restore time.
func (g *stageGuard) podsRestoring(ctx context.Context, kind, uid string) ([]corev1.Pod, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := g.api.List(ctx, list, client.MatchingFields{"spec.nodeName": g.node}); err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", g.node, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		// A deleted pod starts no container: it does not ask.
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Annotations[sandlotv1.AnnotationRestoreKind] == kind && p.Annotations[sandlotv1.AnnotationRestoreUID] == uid {
			out = append(out, corev1.Pod{ObjectMeta: p.ObjectMeta, Spec: corev1.PodSpec{NodeName: g.node}})
		}
	}
	return out, nil
}

// check refuses unless pod may restore the data kind/uid.
func (c *stageCheck) check(ctx context.Context, pod *corev1.Pod, kind, uid string) error {
	name := pod.Annotations[sandlotv1.AnnotationRestoreName]
	why, err := c.denial(ctx, pod, kind, uid, name)
	if err != nil || why == "" {
		return err
	}
	return fmt.Errorf("%w: pod %s/%s does not belong to a Sandbox that restores %s %s/%s: %s", errStageRefused,
		pod.Namespace, pod.Name, kind, pod.Namespace, name, why)
}

// denial says why pod may not restore kind/uid (named name in its
// namespace), "" when it may.
func (c *stageCheck) denial(ctx context.Context, pod *corev1.Pod, kind, uid, name string) (string, error) {
	ann := pod.Annotations
	if pod.Spec.NodeName != c.node {
		return fmt.Sprintf("it is on node %q, not %s", pod.Spec.NodeName, c.node), nil
	}
	if ann[sandlotv1.AnnotationRestoreKind] != kind || ann[sandlotv1.AnnotationRestoreUID] != uid {
		return fmt.Sprintf("its annotations restore %s %s", ann[sandlotv1.AnnotationRestoreKind], ann[sandlotv1.AnnotationRestoreUID]), nil
	}
	owner, why := sandlotController(pod)
	if why != "" {
		return why, nil
	}
	// Everything below depends on the namespace, the data and the owner.
	key := strings.Join([]string{pod.Namespace, name, owner.Kind, owner.Name, string(owner.UID)}, "/")
	if why, ok := c.verdicts[key]; ok {
		return why, nil
	}
	why, err := c.ownerDenial(ctx, pod.Namespace, owner, kind, uid, name)
	if err == nil {
		c.verdicts[key] = why
	}
	return why, err
}

// sandlotController is pod's controller, or why it has none of sandlot's.
func sandlotController(pod *corev1.Pod) (*metav1.OwnerReference, string) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return nil, "no Sandbox or Template controls it"
	}
	if gv, err := schema.ParseGroupVersion(owner.APIVersion); err != nil || gv.Group != sandlotv1.GroupVersion.Group {
		return nil, fmt.Sprintf("its controller is %s %s, not sandlot's", owner.Kind, owner.Name)
	}
	return owner, ""
}

// ownerDenial says why owner, the controller of a pod of namespace ns,
// does not restore kind/uid (named name in ns).
func (c *stageCheck) ownerDenial(ctx context.Context, ns string, owner *metav1.OwnerReference, kind, uid, name string) (string, error) {
	data, why, err := c.data(ctx, kind, ns, name, uid)
	if why != "" || err != nil {
		return why, err
	}
	switch owner.Kind {
	case "Sandbox":
		return c.sandboxDenial(ctx, ns, owner, kind, data)
	case "Template": // an unclaimed warm pool pod restores its template's base
		if kind != sandlotv1.RestoreKindSnapshot {
			return "a warm pool pod restores its Template's base Snapshot only", nil
		}
		return c.baseDenial(ctx, ns, owner.Name, owner.UID, data)
	}
	return fmt.Sprintf("its controller is %s %s, not a Sandbox or Template", owner.Kind, owner.Name), nil
}

// get reads ns/name past the cache, once per check.
func (c *stageCheck) get(ctx context.Context, ns, name string, obj client.Object) (client.Object, error) {
	key := fmt.Sprintf("%T/%s/%s", obj, ns, name)
	if r, ok := c.reads[key]; ok {
		return r.obj, r.err
	}
	err := c.api.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
	c.reads[key] = readResult{obj: obj, err: err}
	return obj, err
}

// data is the Snapshot or PausedSandbox name in the pod's namespace, or
// why it is not the data asked for: the data of another namespace is
// never found here, whatever the pod's annotations say.
func (c *stageCheck) data(ctx context.Context, kind, ns, name, uid string) (client.Object, string, error) {
	var obj client.Object = &sandlotv1.Snapshot{}
	if kind == sandlotv1.RestoreKindPausedSandbox {
		obj = &sandlotv1.PausedSandbox{}
	}
	if name == "" {
		return nil, "its annotations name no " + kind, nil
	}
	obj, err := c.get(ctx, ns, name, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("no %s %s/%s exists", kind, ns, name), nil
	case err != nil:
		return nil, "", fmt.Errorf("get %s %s/%s: %w", kind, ns, name, err)
	case string(obj.GetUID()) != uid:
		return nil, fmt.Sprintf("%s %s/%s has UID %s, not %s", kind, ns, name, obj.GetUID(), uid), nil
	}
	return obj, "", nil
}

// sandboxDenial says why the Sandbox owner does not restore data.
func (c *stageCheck) sandboxDenial(ctx context.Context, ns string, owner *metav1.OwnerReference, kind string, data client.Object) (string, error) {
	sbx := &sandlotv1.Sandbox{}
	key := types.NamespacedName{Namespace: ns, Name: owner.Name}
	err := c.cache.Get(ctx, key, sbx)
	if apierrors.IsNotFound(err) || (err == nil && sbx.UID != owner.UID) {
		err = c.api.Get(ctx, key, sbx) // a sandbox the cache has not seen (yet), or not placed on this node by its status
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("its Sandbox %s does not exist", owner.Name), nil
	case err != nil:
		return "", fmt.Errorf("get sandbox %s/%s: %w", ns, owner.Name, err)
	case sbx.UID != owner.UID:
		return fmt.Sprintf("its Sandbox %s (UID %s) was replaced", owner.Name, owner.UID), nil
	}
	if kind == sandlotv1.RestoreKindSnapshot && sbx.Status.RestoringFrom != "" {
		return ownSnapshotDenial(sbx, data), nil
	}
	src := sbx.Spec.Source
	switch {
	case kind == sandlotv1.RestoreKindPausedSandbox:
		// A resume restores the sandbox's own pause package.
		if metav1.IsControlledBy(data, sbx) {
			return "", nil
		}
		return fmt.Sprintf("it is not Sandbox %s's pause package", sbx.Name), nil
	case src.Snapshot != "":
		if src.Snapshot == data.GetName() {
			return "", nil
		}
		return fmt.Sprintf("Sandbox %s restores Snapshot %s", sbx.Name, src.Snapshot), nil
	case src.Template != "":
		// A template's sandbox (or a pool pod it claimed) restores the
		// template's base.
		return c.baseDenial(ctx, ns, src.Template, "", data)
	}
	return fmt.Sprintf("Sandbox %s has no source", sbx.Name), nil
}

// ownSnapshotDenial says why a sandbox whose node was lost does not
// restore data: only the Snapshot the controller restores it from
// (status.restoringFrom), and only one taken of this very sandbox — its
// status.sandboxID, which the controller wrote from the source sandbox —
// whatever that status names.
func ownSnapshotDenial(sbx *sandlotv1.Sandbox, data client.Object) string {
	snap, ok := data.(*sandlotv1.Snapshot)
	switch {
	case data.GetName() != sbx.Status.RestoringFrom:
		return fmt.Sprintf("Sandbox %s restores Snapshot %s", sbx.Name, sbx.Status.RestoringFrom)
	case !ok || snap.Status.SandboxID == "" || snap.Status.SandboxID != sbx.Status.SandboxID:
		return fmt.Sprintf("Snapshot %s was not taken of Sandbox %s", data.GetName(), sbx.Name)
	}
	return ""
}

// baseDenial says why snap is not a base Snapshot of Template name (of
// UID uid, unless ""): the template's status lists it, or the template
// owns it (an entry goes once a newer base is Ready, while pods of the
// older may still start).
func (c *stageCheck) baseDenial(ctx context.Context, ns, name string, uid types.UID, snap client.Object) (string, error) {
	obj, err := c.get(ctx, ns, name, &sandlotv1.Template{})
	tpl := obj.(*sandlotv1.Template)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("its Template %s does not exist", name), nil
	case err != nil:
		return "", fmt.Errorf("get template %s/%s: %w", ns, name, err)
	case uid != "" && tpl.UID != uid:
		return fmt.Sprintf("its Template %s (UID %s) was replaced", name, uid), nil
	}
	if metav1.IsControlledBy(snap, tpl) {
		return "", nil
	}
	for _, b := range tpl.Status.BaseSnapshots {
		if b.Snapshot == snap.GetName() {
			return "", nil
		}
	}
	return fmt.Sprintf("it is no base Snapshot of Template %s", name), nil
}
