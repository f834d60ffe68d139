package controllers

import (
	"context"
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TemplateReconciler validates Templates. Building a template's base
// snapshot arrives with the templates issue; until then the condition says
// so and sandboxes of the template boot its image cold.
type TemplateReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=sandlot.dev,resources=templates,verbs=get;list;watch
// +kubebuilder:rbac:groups=sandlot.dev,resources=templates/status,verbs=get;update;patch

func (r *TemplateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tpl := &sandlotv1.Template{}
	if err := r.Get(ctx, req.NamespacedName, tpl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := tpl.DeepCopy()
	tpl.Status = templateStatus(tpl)
	return ctrl.Result{}, patchStatus(ctx, r.Client, orig, tpl)
}

// templateStatus is a Template's status, from its spec alone.
func templateStatus(tpl *sandlotv1.Template) sandlotv1.TemplateStatus {
	st := *tpl.Status.DeepCopy()
	st.ObservedGeneration = tpl.Generation
	if err := validateImageRef(tpl.Spec.Image); err != nil {
		setCondition(&st.Conditions, tpl.Generation, sandlotv1.ConditionAccepted, metav1.ConditionFalse,
			sandlotv1.ReasonInvalidImage, err.Error())
	} else {
		setCondition(&st.Conditions, tpl.Generation, sandlotv1.ConditionAccepted, metav1.ConditionTrue,
			sandlotv1.ReasonValid, "template is valid")
	}
	setCondition(&st.Conditions, tpl.Generation, sandlotv1.ConditionBaseSnapshotReady, metav1.ConditionFalse,
		sandlotv1.ReasonNotImplemented, "base snapshots are not built yet: sandboxes of this template boot its image cold")
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

// SetupWithManager watches Templates.
func (r *TemplateReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&sandlotv1.Template{}).Named("template").Complete(r)
}
