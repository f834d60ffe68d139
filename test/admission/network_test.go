package admission

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestAllowOutInsidePlatformDenials: a Sandbox (here an admin's: the
// policy binds everyone) whose
// allowOut names what the chart's network.denyOut denies to every
// sandbox (the kube-apiserver Service, the metadata address, a private
// range) is refused with the entries and the reason, at create and at an
// edit that adds one; public addresses, domains and a range wider than
// every denial are admitted (the denied part stays closed on the node).
func TestAllowOutInsidePlatformDenials(t *testing.T) {
	k := cluster(t).Client
	ctx := context.Background()
	const word = "inside what the platform denies to every sandbox"
	sandbox := func(allowOut ...string) *sandlotv1.Sandbox {
		return &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "net-", Namespace: tenantNS},
			Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "python"},
				Network: &sandlotv1.SandboxNetwork{AllowOut: allowOut}}}
	}
	waitEnforced(t, "the policy refuses an allowOut of 10.0.0.1", func() error {
		return asForbidden(k.Create(ctx, sandbox("10.0.0.1")))
	}, word)
	for _, entries := range [][]string{{"10.0.0.1"}, {"169.254.169.254"}, {"example.com", "192.168.4.0/24"}, {"127.0.0.1/32"}} {
		err := k.Create(ctx, sandbox(entries...))
		if err := invalidWith(err, word, entries[len(entries)-1], "network.openOut"); err != nil {
			t.Errorf("allowOut %v: %v", entries, err)
		}
	}
	ok := sandbox("8.8.8.8", "example.com", "*.example.org", "0.0.0.0/0", "203.0.113.0/24")
	if err := k.Create(ctx, ok); err != nil {
		t.Fatalf("allowOut of public addresses, domains and 0.0.0.0/0 refused: %v", err)
	}
	ok.Spec.Network.AllowOut = append(ok.Spec.Network.AllowOut, "10.96.0.10")
	if err := invalidWith(k.Update(ctx, ok), word, "10.96.0.10"); err != nil {
		t.Errorf("an edit adding 10.96.0.10: %v", err)
	}
}

// asForbidden maps the policy's Invalid to the Forbidden waitEnforced
// expects (so the wait reads the same for every policy).
func asForbidden(err error) error {
	if apierrors.IsInvalid(err) {
		return apierrors.NewForbidden(sandlotv1.GroupVersion.WithResource("sandboxes").GroupResource(), "", err)
	}
	return err
}
