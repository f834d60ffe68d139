package e2b

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestSecureMetrics: the API's metrics, as the chart serves them, answer
// a service account bound to the chart's sandlot-metrics-reader, refuse
// one that is not (403), a caller with no token (401) and a forged one. The API checks
// both as its own service account, with the chart's RBAC.
func TestSecureMetrics(t *testing.T) {
	f := setup(t)
	t.Parallel()
	cfg, err := f.env.ComponentConfig("sandlot-api")
	if err != nil {
		t.Fatal(err)
	}
	h, err := SecureMetricsHandler(cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name  string
		token string
		code  int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a reader", saToken(t, f, "metrics-reader", true), http.StatusOK},
		{"not a reader", saToken(t, f, "metrics-stranger", false), http.StatusForbidden},
		// The API server calls the token invalid with an error, which
		// controller-runtime's filter answers 500, as the controller's.
		{"a forged token", "not-a-token", http.StatusInternalServerError},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.name, resp.StatusCode, body, tc.code)
		}
		if page := strings.Contains(string(body), "# HELP go_goroutines"); page != (tc.code == http.StatusOK) {
			t.Errorf("%s: the metrics page served: %t", tc.name, page)
		}
	}
}

// saToken makes a service account in the test namespace, bound to the
// chart's sandlot-metrics-reader when reader, and returns a token of it.
func saToken(t *testing.T, f *fixture, name string, reader bool) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS}}
	if err := f.c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if reader {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sandlot-metrics-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: testNS}}}
		if err := f.c.Create(ctx, crb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.c.Delete(context.Background(), crb) })
	}
	cs, err := kubernetes.NewForConfig(f.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(testNS).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s: %v", name, err)
	}
	return tr.Status.Token
}
