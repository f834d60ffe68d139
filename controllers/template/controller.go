package template

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/metrics"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// Reconciler validates Templates and builds their base snapshots
// (base.go).
type Reconciler struct {
	client.Client
	// Recorder emits an Event per status transition (nil: none).
	Recorder events.EventRecorder
	// MilliCPUPerVCPU is what a warm pool pod requests per vCPU.
	MilliCPUPerVCPU int64
	// ImagePullPolicy is the pull policy of its pods ("": IfNotPresent).
	ImagePullPolicy corev1.PullPolicy
	// SlotsPerNode is a template's start slots per node when its spec
	// does not say (spec.slots).
	SlotsPerNode int
	// Holds are the nodes whose pool refills wait for a start their pool
	// pods gave way to (shared with the sandbox Reconciler; nil: none).
	Holds *placement.Holds
}

// +kubebuilder:rbac:groups=sandlot.dev,resources=templates,verbs=get;list;watch
// +kubebuilder:rbac:groups=sandlot.dev,resources=templates/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=sandlot.dev,resources=snapshots,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch

// buildPoll re-reads a build in progress (the probe's deadline passes
// without an event).
const buildPoll = 2 * time.Second

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tpl := &sandlotv1.Template{}
	if err := r.Get(ctx, req.NamespacedName, tpl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if tpl.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // its builders and bases go with it (owner references)
	}
	orig := tpl.DeepCopy()
	tpl.Status = templateStatus(tpl)
	var res ctrl.Result
	var err error
	if meta.IsStatusConditionTrue(tpl.Status.Conditions, sandlotv1.ConditionAccepted) {
		res, err = r.build(ctx, tpl)
	}
	if perr := writes.PatchStatus(ctx, r.Client, r.Recorder, orig, tpl); perr != nil {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	if tpl.ResourceVersion != orig.ResourceVersion { // written, not refused as stale
		metrics.ObserveBuildFailures(orig.Status.BaseSnapshots, tpl.Status.BaseSnapshots)
	}
	return res, err
}

// build moves each eligible node's base snapshot of the current
// generation one step, then retires older ones.
func (r *Reconciler) build(ctx context.Context, tpl *sandlotv1.Template) (ctrl.Result, error) {
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list nodes: %w", err)
	}
	class, err := podspec.RuntimeClassTerms(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	cons := placement.TemplateConstraints(tpl).And(class.Constraints)
	current := map[string]sandlotv1.BaseSnapshot{}
	var pools []sandlotv1.NodePool
	eligible := 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if placement.IneligibleFor(n, cons) != "" {
			continue // its tolerations and selector choose the nodes built on
		}
		eligible++
		entry, err := r.buildNode(ctx, tpl, n)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("base snapshot of %s on %s: %w", tpl.Name, n.Name, err)
		}
		current[n.Name] = entry
		np, err := r.pool(ctx, tpl, n.Name, entry)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("warm pool of %s on %s: %w", tpl.Name, n.Name, err)
		}
		pools = append(pools, np)
	}
	tpl.Status.Pool = pools
	for _, b := range tpl.Status.BaseSnapshots { // a node no longer eligible keeps what it had
		if _, ok := current[b.Node]; !ok && b.Revision == BaseRevision(tpl) {
			current[b.Node] = b
		}
	}
	old, err := r.retire(ctx, tpl, current)
	if err != nil {
		return ctrl.Result{}, err
	}
	tpl.Status.BaseSnapshots = append(old, slices.Collect(maps.Values(current))...)
	slices.SortFunc(tpl.Status.BaseSnapshots, func(a, b sandlotv1.BaseSnapshot) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Revision, b.Revision))
	})
	tpl.Status.BaseRevision = BaseRevision(tpl)
	setBaseCondition(&tpl.Status, tpl.Status.BaseRevision, tpl.Generation, eligible)
	return ctrl.Result{RequeueAfter: r.requeueAfter(tpl, current, pools, time.Now())}, nil
}

// requeueAfter is when to look again: soon while a base builds, uploads
// or a pool fills, at the next retry of a failed build, else never (0).
func (r *Reconciler) requeueAfter(tpl *sandlotv1.Template, current map[string]sandlotv1.BaseSnapshot,
	pools []sandlotv1.NodePool, now time.Time) time.Duration {
	for _, e := range current {
		if e.Phase == sandlotv1.BaseBuilding || (e.Phase == sandlotv1.BaseReady && e.RemoteStatus == sandlotv1.RemoteInProgress) {
			return buildPoll
		}
	}
	for _, p := range pools {
		if p.Starting > 0 || p.Ready != tpl.Spec.WarmPool || int(p.Slots) != r.slotsOf(tpl) {
			return buildPoll
		}
	}
	return retryWait(current, now)
}

// retire drops the older bases and the stale build checkpoints of the
// nodes whose current base is Ready, and returns the old entries to keep.
func (r *Reconciler) retire(ctx context.Context, tpl *sandlotv1.Template, current map[string]sandlotv1.BaseSnapshot) ([]sandlotv1.BaseSnapshot, error) {
	old, err := r.dropOldBases(ctx, tpl, current)
	if err != nil {
		return nil, err
	}
	return old, r.dropStaleCheckpoints(ctx, tpl, current)
}

// templateStatus is a Template's status with its validation from its
// spec alone.
func templateStatus(tpl *sandlotv1.Template) sandlotv1.TemplateStatus {
	st := *tpl.Status.DeepCopy()
	st.ObservedGeneration = tpl.Generation
	if err := validateImageRef(tpl.Spec.Image); err != nil {
		writes.SetCondition(&st.Conditions, tpl.Generation, sandlotv1.ConditionAccepted, metav1.ConditionFalse,
			sandlotv1.ReasonInvalidImage, err.Error())
		writes.SetCondition(&st.Conditions, tpl.Generation, sandlotv1.ConditionBaseSnapshotReady, metav1.ConditionFalse,
			sandlotv1.ReasonInvalidImage, "nothing is built from an invalid template")
	} else {
		writes.SetCondition(&st.Conditions, tpl.Generation, sandlotv1.ConditionAccepted, metav1.ConditionTrue,
			sandlotv1.ReasonValid, "template is valid")
	}
	return st
}

// imageRef is the OCI reference grammar of github.com/distribution/reference.
var imageRef = func() *regexp.Regexp {
	const (
		component = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
		domain    = `(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?`
		tag       = `[\w][\w.-]{0,127}`
		digest    = `sha256:[a-f0-9]{64}`
	)
	return regexp.MustCompile(`^(?:` + domain + `/)?` + component + `(?:/` + component + `)*(?::` + tag + `)?(?:@` + digest + `)?$`)
}()

func validateImageRef(ref string) error {
	if !imageRef.MatchString(ref) {
		return fmt.Errorf("spec.image %q is not a valid OCI image reference (name[:tag][@sha256:digest])", ref)
	}
	return nil
}

// SetupWithManager watches Templates, the builders and base snapshots
// they own, their pool pods, and nodes (a node joining gets a base).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&sandlotv1.Template{}).
		Owns(&sandlotv1.Sandbox{}).
		Owns(&sandlotv1.Snapshot{}).
		// Pool pods by label, not owner: a claimed one's owner is its
		// Sandbox, and its activation lets the pool refill (poolPods).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(poolTemplate)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allTemplates),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{},
				placement.NodeReadyChanged(), guestChanged()))).
		Named("template").Complete(r)
}

// guestChanged: a node's agent published another guest (an upgrade):
// its bases are built again.
func guestChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[sandlotv1.AnnotationGuest] != e.ObjectNew.GetAnnotations()[sandlotv1.AnnotationGuest]
	}}
}

// poolTemplate maps a warm pool pod, claimed or not, to its Template.
func poolTemplate(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[sandlotv1.LabelPool]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

func (r *Reconciler) allTemplates(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &sandlotv1.TemplateList{}
	if err := r.List(ctx, list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, t := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
	}
	return reqs
}
