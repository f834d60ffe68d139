package e2b

import (
	"context"
	"net/http"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestListTemplatesV2: GET /v2/templates (its POST, the legacy build,
// claimed the path and it answered 405) pages through the templates GET
// /templates lists, one per page with limit=1, each once; a teamID of
// another team is refused. Not parallel: no other test adds templates
// while it pages.
func TestListTemplatesV2(t *testing.T) {
	f := setup(t)
	for _, name := range []string{"paged-a", "paged-b"} {
		tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
			Spec: sandlotv1.TemplateSpec{Image: "registry.example/python:3.12"}}
		if err := f.c.Create(context.Background(), tpl); err != nil {
			t.Fatal(err)
		}
		if err := waitCached(f.kube, tpl); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for _, tj := range decode[[]templateJSON](t, f.api(t, "GET", "/templates", nil), http.StatusOK) {
		want = append(want, tj.TemplateID)
	}
	var got []string
	path := "/v2/templates?limit=1"
	for range len(want) + 1 {
		r := f.api(t, "GET", path, nil)
		page := decode[[]templateJSON](t, r, http.StatusOK)
		if len(page) != 1 {
			t.Fatalf("GET %s: %d templates, want 1", path, len(page))
		}
		got = append(got, page[0].TemplateID)
		next := r.header.Get("X-Next-Token")
		if next == "" {
			break
		}
		path = "/v2/templates?limit=1&nextToken=" + next
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("paged %v, want each of GET /templates' %v once", got, want)
	}
	f.api(t, "GET", "/v2/templates?teamID=another-team", nil).wantError(t, http.StatusForbidden, "is not the team of this API key")
	f.api(t, "GET", "/v2/templates?limit=0", nil).wantError(t, http.StatusBadRequest, `query "limit"`)
}
