package isolation

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// envdStatus is the status of envd's GET /envs at ip with token (none
// when empty): 401 when the guest refuses.
func envdStatus(t *testing.T, ip, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+ip+":49983/envs", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("envd at %s: %v", ip, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// isoTemplate is the suite's template: a small writable layer (64 MiB)
// so a guest fills it quickly, its base Ready on every node.
func isoTemplate(t *testing.T, k client.Client) {
	t.Helper()
	defaultImage = sbxtest.DefaultImage(t)
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "iso", Namespace: "default"},
		Spec: sandlotv1.TemplateSpec{Image: defaultImage, WritableLayerMiB: 64,
			Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}}}
	if err := k.Create(context.Background(), tpl); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := sbxtest.WaitBases(context.Background(), k, client.ObjectKeyFromObject(tpl), len(c.Nodes), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
}
