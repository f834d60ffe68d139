package network

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestPlatformDenials tries, as a tenant would, to reach what the chart's
// network.denyOut closes to every sandbox: an allowOut naming the
// kube-apiserver's Service is refused by the installed admission policy
// with the reason; an allowOut domain whose answer is that Service's
// address resolves but opens nothing; and with egress closed, a name
// allowOut does not match resolves to nothing and never reaches the
// upstream DNS (no tunnel out through queries), but the cluster name the
// operator lets be resolved (network.resolveWhenClosed).
func TestPlatformDenials(t *testing.T) {
	k := sbxtest.Client(t, c)
	kubeService(t, k)
	asked := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "net-platform-asked", Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: tpl},
			Network: &sandlotv1.SandboxNetwork{AllowOut: []string{"api.allowed.test", inet.IPPrivate}}}}
	err := k.Create(context.Background(), asked)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), inet.IPPrivate+" inside what the platform denies") {
		t.Fatalf("a Sandbox with allowOut %s: %v, want refused (422) naming it", inet.IPPrivate, err)
	}

	sbxtest.Template(t, k, tpl)
	s := newSandbox(t, k, "net-platform", sandlotv1.SandboxSource{Template: tpl}, &sandlotv1.SandboxNetwork{
		AllowInternetAccess: ptr.To(false), AllowOut: []string{"api.allowed.test", "private.allowed.test"}})
	tunnel := fmt.Sprintf("c2VjcmV0-%d.public.test", time.Now().UnixNano())
	expect(t, k, s,
		resolves("private.allowed.test", inet.IPPrivate), refused(inet.IPPrivate+":443"),
		resolves("api.allowed.test", inet.IPAllowed), reached(inet.IPAllowed),
		unresolved(tunnel),
		// The operator's cluster name: answered with egress closed (the
		// chart's network.resolveWhenClosed), and still refused above.
		resolves(clusterName, inet.IPPrivate),
	)
	if tnet.Asked(tunnel) {
		t.Errorf("the upstream DNS was asked %s by a sandbox whose egress is closed", tunnel)
	}
	if !tnet.Asked("api.allowed.test") {
		t.Errorf("the upstream DNS was never asked api.allowed.test: the resolver's record of names is not what this test reads")
	}
}

// clusterName is the kubernetes Service's name, which the suite's
// network.resolveWhenClosed lets a closed sandbox resolve.
const clusterName = "kubernetes.default.svc.cluster.local"

// kubeService checks that inet.IPPrivate is the kubernetes Service: the
// address whose opening would hand a guest the API server.
func kubeService(t *testing.T, k client.Client) {
	t.Helper()
	svc := &corev1.Service{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "kubernetes"}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != inet.IPPrivate {
		t.Fatalf("the kubernetes Service is %s, the test zone's private.allowed.test %s", svc.Spec.ClusterIP, inet.IPPrivate)
	}
}
