package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
)

// BudgetName is the PodDisruptionBudget of each namespace's sandbox pods.
const BudgetName = "sandlot-sandboxes"

// Reconciler marks the sandboxes of cordoned nodes to move, or says why
// they cannot, and keeps each namespace's sandbox pods under a budget.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
	// SharedStore: the chart's store is shared (s3, juicefs).
	SharedStore bool
}

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes,verbs=get;list;watch;patch

// Reconcile decides one sandbox's move.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sbx := &sandlotv1.Sandbox{}
	if err := r.Get(ctx, req.NamespacedName, sbx); err != nil || sbx.DeletionTimestamp != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := r.ensureBudget(ctx, sbx.Namespace); err != nil {
		return ctrl.Result{}, err
	}
	w := world{Sandbox: sbx, SharedStore: r.SharedStore}
	var err error
	if w.Node, err = r.node(ctx, sbx.Status.NodeName); err != nil {
		return ctrl.Result{}, err
	}
	if w.Origin, err = r.node(ctx, sbx.Annotations[sandlotv1.AnnotationMoveFrom]); err != nil {
		return ctrl.Result{}, err
	}
	if cordoned(w.Node) && sbx.Annotations[sandlotv1.AnnotationMoveFrom] == "" {
		if w.Elsewhere, err = r.elsewhere(ctx, sbx); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, r.apply(ctx, sbx, decide(w))
}

// apply writes the marks (a merge patch of two annotations) and says
// what changed in an Event.
func (r *Reconciler) apply(ctx context.Context, sbx *sandlotv1.Sandbox, m marks) error {
	from, blocked := sbx.Annotations[sandlotv1.AnnotationMoveFrom], sbx.Annotations[sandlotv1.AnnotationMoveBlocked]
	if from == m.MoveFrom && blocked == m.Blocked {
		return nil
	}
	value := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		sandlotv1.AnnotationMoveFrom: value(m.MoveFrom), sandlotv1.AnnotationMoveBlocked: value(m.Blocked)}}})
	if err := r.Patch(ctx, sbx, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("mark sandbox %s/%s for its node's drain: %w", sbx.Namespace, sbx.Name, err)
	}
	r.event(sbx, from, m)
	return nil
}

func (r *Reconciler) event(sbx *sandlotv1.Sandbox, from string, m marks) {
	if r.Recorder == nil {
		return
	}
	switch {
	case m.MoveFrom != "" && from == "":
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandlotv1.ReasonMoving, "Move",
			"node %s is cordoned: pausing the sandbox there to resume it on another node", m.MoveFrom)
	case m.MoveFrom == "" && from != "" && sbx.Status.NodeName != from:
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandlotv1.ReasonMoved, "Move",
			"moved from node %s to node %s", from, sbx.Status.NodeName)
	case m.Blocked != "":
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandlotv1.ReasonCannotMove, "Move",
			"node %s is cordoned and the sandbox cannot move (its pod holds the drain): %s", sbx.Status.NodeName, m.Blocked)
	}
}

// ensureBudget keeps the namespace's PodDisruptionBudget: every sandbox
// pod (a non-empty sandbox label: not the pool's unclaimed pods), no
// eviction, Ready or not: a drain waits while the sandboxes move (a
// pausing VM's pod is not Ready, and AlwaysAllow for unready pods let
// kubectl drain kill it mid-pause on a real cluster). A Sandbox has no
// scale subresource, so the disruption controller reports the budget
// SyncFailed and fails safe: no disruption allowed, as meant; one
// budget per namespace costs no write per sandbox (a budget each
// would, on the path bench-scale runs 100 times a second).
func (r *Reconciler) ensureBudget(ctx context.Context, ns string) error {
	err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: BudgetName}, &policyv1.PodDisruptionBudget{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: BudgetName, Namespace: ns,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "sandlot-controller"}},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero,
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: sandlotv1.LabelSandbox, Operator: metav1.LabelSelectorOpExists},
				{Key: sandlotv1.LabelSandbox, Operator: metav1.LabelSelectorOpNotIn, Values: []string{""}}}}}}
	if err := r.Create(ctx, pdb); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PodDisruptionBudget %s/%s: %w", ns, BudgetName, err)
	}
	return nil
}

func (r *Reconciler) node(ctx context.Context, name string) (*corev1.Node, error) {
	if name == "" {
		return nil, nil
	}
	n := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return n, nil
}

// elsewhere says why no node but the sandbox's own could run it, "" when
// one can (its template's tolerations and node selector, the RuntimeClass's
// scheduling; room is the resume's to wait for).
func (r *Reconciler) elsewhere(ctx context.Context, sbx *sandlotv1.Sandbox) (string, error) {
	class, err := podspec.RuntimeClassTerms(ctx, r.Client)
	if err != nil {
		return "", err
	}
	cons := class.Constraints
	if name := sbx.Spec.Source.Template; name != "" {
		tpl := &sandlotv1.Template{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: name}, tpl); client.IgnoreNotFound(err) != nil {
			return "", err
		} else if err == nil {
			cons = placement.TemplateConstraints(tpl).And(cons)
		}
	}
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}); err != nil {
		return "", fmt.Errorf("list nodes: %w", err)
	}
	var why []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Name == sbx.Status.NodeName {
			continue
		}
		reason := placement.IneligibleFor(n, cons)
		if reason == "" {
			return "", nil
		}
		why = append(why, n.Name+": "+reason)
	}
	if len(why) == 0 {
		return "no other node is labelled " + sandlotv1.LabelRuntime + "=true", nil
	}
	return strings.Join(why, "; "), nil
}
