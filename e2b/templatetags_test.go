package e2b

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestTemplateTags: a tag names the template's build of when it was
// assigned; "default" the current one. Listed, resolved by a create's
// "name:tag", refused (409, saying so) once a rebuild replaced its build;
// removed; "default" cannot be assigned or removed; the aliases route
// beside it still answers.
func TestTemplateTags(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "tagged", Namespace: testNS},
		Spec: sandlotv1.TemplateSpec{Image: "registry.example/python:3.12"}}
	if err := f.c.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	setRevision := func(rev string) {
		t.Helper()
		if err := f.c.Get(ctx, client.ObjectKeyFromObject(tpl), tpl); err != nil {
			t.Fatal(err)
		}
		tpl.Status.BaseRevision = rev
		if err := f.c.Status().Update(ctx, tpl); err != nil {
			t.Fatal(err)
		}
		if aerr := f.srv.kube.waitSeen(ctx, tpl); aerr != nil {
			t.Fatal(aerr)
		}
	}
	setRevision("rev-1")
	var assigned struct {
		Tags    []string `json:"tags"`
		BuildID string   `json:"buildID"`
	}
	r := f.api(t, "POST", "/templates/tags", map[string]any{"target": "tagged", "tags": []string{"prod", "v1.0"}})
	if r.code != http.StatusCreated || json.Unmarshal(r.body, &assigned) != nil || assigned.BuildID != buildUUID("rev-1") {
		t.Fatalf("assign: %d %s", r.code, r.body)
	}
	wantTags(t, f, "default="+buildUUID("rev-1"), "prod="+buildUUID("rev-1"), "v1.0="+buildUUID("rev-1"))
	team := withTeam(ctx, testNS)
	if src, aerr := f.srv.resolveTemplate(team, "tagged:prod"); aerr != nil || src.Template != "tagged" {
		t.Fatalf("tagged:prod resolves to %+v, %v", src, aerr)
	}
	setRevision("rev-2") // a rebuild
	if _, aerr := f.srv.resolveTemplate(team, "tagged:prod"); aerr == nil || aerr.Code != http.StatusConflict {
		t.Fatalf("a tag of a replaced build resolves: %v", aerr)
	}
	if _, aerr := f.srv.resolveTemplate(team, "tagged:default"); aerr != nil {
		t.Fatal(aerr)
	}
	f.api(t, "POST", "/templates/tags", map[string]any{"target": "tagged:prod", "tags": []string{"x"}}).wantError(t, http.StatusConflict, "no longer keeps")
	f.api(t, "POST", "/templates/tags", map[string]any{"target": "tagged", "tags": []string{"default"}}).wantError(t, http.StatusBadRequest, "latest build")
	f.api(t, "POST", "/templates/tags", map[string]any{"target": "nope", "tags": []string{"x"}}).wantError(t, http.StatusNotFound, "not found")
	if r := f.api(t, "POST", "/templates/tags", map[string]any{"target": "tagged:default", "tags": []string{"prod"}}); r.code != http.StatusCreated {
		t.Fatalf("move prod: %d %s", r.code, r.body)
	}
	wantTags(t, f, "default="+buildUUID("rev-2"), "prod="+buildUUID("rev-2"), "v1.0="+buildUUID("rev-1"))
	if r := f.api(t, "DELETE", "/templates/tags", map[string]any{"name": "tagged", "tags": []string{"v1.0"}}); r.code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	f.api(t, "DELETE", "/templates/tags", map[string]any{"name": "tagged", "tags": []string{"v1.0"}}).wantError(t, http.StatusNotFound, "no tag")
	wantTags(t, f, "default="+buildUUID("rev-2"), "prod="+buildUUID("rev-2"))
	if r := f.api(t, "GET", "/templates/aliases/tagged", nil); r.code != http.StatusOK {
		t.Fatalf("the aliases route: %d %s", r.code, r.body)
	}
}

func wantTags(t *testing.T, f *fixture, want ...string) {
	t.Helper()
	var tags []templateTag
	r := f.api(t, "GET", "/templates/tagged/tags", nil)
	if r.code != http.StatusOK || json.Unmarshal(r.body, &tags) != nil {
		t.Fatalf("list: %d %s", r.code, r.body)
	}
	var got []string
	for _, tg := range tags {
		got = append(got, tg.Tag+"="+tg.BuildID)
	}
	if len(got) != len(want) {
		t.Fatalf("tags %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("tags %v, want %v", got, want)
		}
	}
}
