package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/poll"
)

// TestSandboxFinalizerAtCreate: the chart's MutatingAdmissionPolicy puts
// the controller's finalizer on every Sandbox at its create, keeping the
// creator's own finalizers and never adding it twice (the controller then
// makes no update per sandbox).
func TestSandboxFinalizerAtCreate(t *testing.T) {
	e := cluster(t)
	poll.Eventually(t, enforced, "the policy sets the finalizer", func() error {
		got, err := createSandbox(e.Client, nil)
		if err != nil {
			t.Fatal(err)
		}
		return hasFinalizers(got, sandlotv1.FinalizerSandboxVM)
	})
	for name, tc := range map[string]struct{ own, want []string }{
		"none":              {nil, []string{sandlotv1.FinalizerSandboxVM}},
		"the creator's own": {[]string{"example.com/keep"}, []string{"example.com/keep", sandlotv1.FinalizerSandboxVM}},
		"already there":     {[]string{sandlotv1.FinalizerSandboxVM}, []string{sandlotv1.FinalizerSandboxVM}},
	} {
		got, err := createSandbox(e.Client, tc.own)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := hasFinalizers(got, tc.want...); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// createSandbox creates a Sandbox in namespace tenant as c, with
// finalizers, and returns it as stored; it is gone again afterwards (the
// finalizers dropped: no controller runs here).
func createSandbox(c client.Client, finalizers []string) (*sandlotv1.Sandbox, error) {
	ctx := context.Background()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "sbx-", Namespace: tenantNS, Finalizers: finalizers},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "t"}}}
	if err := c.Create(ctx, sbx); err != nil {
		return nil, fmt.Errorf("create a sandbox: %w", err)
	}
	got := sbx.DeepCopy()
	sbx.Finalizers = nil
	if err := env.Client.Update(ctx, sbx); err != nil {
		return nil, fmt.Errorf("drop the finalizers: %w", err)
	}
	return got, client.IgnoreNotFound(env.Client.Delete(ctx, sbx))
}

func hasFinalizers(sbx *sandlotv1.Sandbox, want ...string) error {
	if !slices.Equal(sbx.Finalizers, want) {
		return errors.New(fmt.Sprint("finalizers ", sbx.Finalizers, ", want ", want))
	}
	return nil
}
