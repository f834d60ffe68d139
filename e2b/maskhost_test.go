package e2b

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestMaskRequestHost: a sandbox created with network.maskRequestHost
// gets that Host, its ${PORT} the port's, on every forwarded request; one
// without gets the client's.
func TestMaskRequestHost(t *testing.T) {
	var got string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Host }))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	p := newProxy(&Server{})
	for _, tc := range []struct{ mask, want string }{
		{"localhost:${PORT}", "localhost:3000"},
		{"${PORT}-app.internal", "3000-app.internal"},
		{"", "client.example"},
	} {
		sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if tc.mask != "" {
			sbx.Annotations[AnnotationMaskRequestHost] = tc.mask
		}
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := withMask(context.WithValue(r.Context(), targetKey{}, u), sbx, 3000)
			p.rp.ServeHTTP(w, r.WithContext(ctx))
		}))
		req, _ := http.NewRequest("GET", front.URL+"/", nil)
		req.Host = "client.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		front.Close()
		if got != tc.want {
			t.Errorf("mask %q: the sandbox saw Host %q, want %q", tc.mask, got, tc.want)
		}
	}
}
