package admission

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// TestNoPlainRuntimeClassPods: with admission.allowPlainRuntimeClassPods
// false only the controller creates pods of the sandlot RuntimeClass;
// other pods stay alice's. The default policy is back after the test.
func TestNoPlainRuntimeClassPods(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	if err := applyPolicy(ctx, e.Client, map[string]any{"admission": map[string]any{"allowPlainRuntimeClassPods": false}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := applyPolicy(ctx, e.Client, nil); err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, enforced, "the default policy admits alice's plain sandlot pod again", func() error {
			return createProbe(as(t, alice), podOf(nil, nil, true))
		})
	})
	c := as(t, alice)
	waitEnforced(t, "the policy refuses alice's plain sandlot pod", func() error {
		return createProbe(c, podOf(nil, nil, true))
	}, plainRefusal)
	if err := refusedWith(createProbe(c, podOf(nil, restoreAnnotations(t), true)), refusal); err != nil {
		t.Errorf("alice's restoring pod: %v", err)
	}
	if err := createProbe(c, podOf(map[string]string{"app": "web"}, nil, false)); err != nil {
		t.Errorf("alice's pod of no RuntimeClass refused: %v", err)
	}
	if err := createProbe(as(t, controllerUser), sandboxPod(t)); err != nil {
		t.Errorf("the controller's pod refused: %v", err)
	}
	if err := createProbe(as(t, controllerUser), podOf(nil, nil, true)); err != nil {
		t.Errorf("the controller's plain sandlot pod refused: %v", err)
	}
	// A binding or an eviction is a CREATE with no pod spec in it.
	unbound := podOf(nil, nil, false)
	if err := e.Client.Create(ctx, unbound); err != nil {
		t.Fatal(err)
	}
	bind := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: unbound.Name, Namespace: tenantNS},
		Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	if err := e.Client.SubResource("binding").Create(ctx, unbound, bind); err != nil {
		t.Errorf("a binding refused: %v", err)
	}
	evict := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: unbound.Name, Namespace: tenantNS}}
	if err := c.SubResource("eviction").Create(ctx, unbound, evict); err != nil {
		t.Errorf("alice's eviction refused: %v", err)
	}
}
