package data

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// PausedSandboxReconciler starts a PausedSandbox's status (Pending, on the
// node of its pod) and holds its deletion while a resume restores from it.
// The Sandbox reconciler creates and releases PausedSandboxes; the agent
// makes the package.
type PausedSandboxReconciler struct {
	client.Client
	// Recorder emits an Event per status transition (nil: none).
	Recorder events.EventRecorder
	// APIReader confirms nothing builds on a package before it is let go
	// (a cache lags; nil: the cache only).
	APIReader client.Reader
}

// +kubebuilder:rbac:groups=sandlot.dev,resources=pausedsandboxes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=pausedsandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=pausedsandboxes/finalizers,verbs=update

func (r *PausedSandboxReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pkg := &sandlotv1.PausedSandbox{}
	if err := r.Get(ctx, req.NamespacedName, pkg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pkg.DeletionTimestamp != nil {
		if err := r.release(ctx, pkg); err != nil {
			return ctrl.Result{}, err
		}
		after, err := handOffIfNodeGone(ctx, r.Client, r.Recorder, pkg, &pkg.Status.DataStatus)
		return ctrl.Result{RequeueAfter: after}, err
	}
	orig := pkg.DeepCopy()
	pkg.Status.DataStatus = pausedStatus(pkg)
	pkg.Status.ExpiresAt = expiresAt(pkg.CreationTimestamp, pkg.Spec.ExpireAfterSeconds, 0)
	if err := writes.PatchStatus(ctx, r.Client, r.Recorder, orig, pkg); err != nil {
		return ctrl.Result{}, err
	}
	// An expired package goes with its data; its Sandbox then ends
	// PausedStateDiscarded, as when a user deletes it.
	left, err := deleteIfExpired(ctx, r.Client, pkg, pkg.Status.ExpiresAt, time.Now())
	return ctrl.Result{RequeueAfter: left}, err
}

// pausedStatus starts a new package's status; the agent moves it on.
func pausedStatus(pkg *sandlotv1.PausedSandbox) sandlotv1.DataStatus {
	st := *pkg.Status.DataStatus.DeepCopy()
	st.ObservedGeneration = pkg.Generation
	if st.Phase == "" {
		st.Phase = sandlotv1.DataPending
	}
	if st.NodeName == "" {
		st.NodeName = pkg.Spec.NodeName
	}
	writes.SetCondition(&st.Conditions, pkg.Generation, sandlotv1.ConditionScheduled, metav1.ConditionTrue,
		sandlotv1.ReasonNodeAssigned, "the node agent on "+pkg.Spec.NodeName+" makes the pause package")
	return st
}

// release lets a deleted package go unless its Sandbox is being resumed
// from it right now, or a Snapshot or package builds on its memory (one
// of the resumed sandbox taken before the package went).
func (r *PausedSandboxReconciler) release(ctx context.Context, pkg *sandlotv1.PausedSandbox) error {
	if !controllerutil.ContainsFinalizer(pkg, sandlotv1.FinalizerInUse) {
		return nil
	}
	sbx := &sandlotv1.Sandbox{}
	err := r.Get(ctx, types.NamespacedName{Namespace: pkg.Namespace, Name: pkg.Name}, sbx)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("get sandbox of paused sandbox %s: %w", pkg.Name, err)
	}
	if err == nil && sbx.DeletionTimestamp == nil && sbx.Status.Phase == sandlotv1.SandboxResuming {
		return nil // the resume's pod restores from it; the Sandbox's update wakes us
	}
	names, err := BuildsOn(ctx, r.Client, r.APIReader, pkg.Namespace, sandlotv1.RestoreKindPausedSandbox, pkg.Name, pkg.UID)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return holdDeletion(ctx, r.Client, r.Recorder, pkg, &pkg.Status.Conditions, "builds on it", names)
	}
	controllerutil.RemoveFinalizer(pkg, sandlotv1.FinalizerInUse)
	if err := r.Update(ctx, pkg); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("remove finalizer of paused sandbox %s: %w", pkg.Name, err)
	}
	return nil
}

// SetupWithManager watches PausedSandboxes and their Sandboxes.
func (r *PausedSandboxReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandlotv1.PausedSandbox{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(dataOnNode(r.Client, func() client.ObjectList { return &sandlotv1.PausedSandboxList{} })),
			builder.WithPredicates(nodeDeleted())).
		Watches(&sandlotv1.Sandbox{}, handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
			})).
		// A dependent's deletion wakes the deletion it held.
		Watches(&sandlotv1.Snapshot{}, handler.EnqueueRequestsFromMapFunc(pausedDependedOn)).
		Watches(&sandlotv1.PausedSandbox{}, handler.EnqueueRequestsFromMapFunc(pausedDependedOn)).
		Named("pausedsandbox").
		Complete(r)
}
