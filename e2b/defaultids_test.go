package e2b

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// teamD is the tenant team of TestPublicTemplateCannotShadowDefaultIDs.
const teamD = "team-d"

// TestPublicTemplateCannotShadowDefaultIDs (issue 35 row 1): a tenant
// team publishes templates named "base" and like the default template;
// another team's create with the SDKs' default ID still runs its own
// default template, and nothing of the tenant's is copied into it.
func TestPublicTemplateCannotShadowDefaultIDs(t *testing.T) {
	f := setup(t)
	base, _, _ := teamServer(t, f, teamD, Config{CreateTimeout: 2 * time.Second})
	ctx := context.Background()
	for _, name := range []string{"base", "code-interpreter-v1"} {
		evil := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamD,
			Labels: map[string]string{sandlotv1.LabelPublic: "true"}},
			Spec: sandlotv1.TemplateSpec{Image: "registry.example/evil:1"}}
		if err := f.c.Create(ctx, evil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.c.Delete(context.Background(), evil) })
	}
	// team-d's own default template (teamServer made it) published too.
	dflt := &sandlotv1.Template{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: teamD, Name: defaultTpl}, dflt); err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataLabel(&dflt.ObjectMeta, sandlotv1.LabelPublic, "true")
	if err := f.c.Update(ctx, dflt); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"base", "code-interpreter-v1"} {
		probe := "default-id-" + id
		go func() { // the create times out (envtest runs no controller)
			_, _ = send(base, "POST", "/v2/sandboxes", map[string]any{"templateID": id,
				"metadata": map[string]string{"probe": probe}}, "X-API-KEY", f.key)
		}()
		poll.Eventually(t, 10*time.Second, "the sandbox of "+id, func() error {
			list := &sandlotv1.SandboxList{}
			if err := f.c.List(ctx, list, client.InNamespace(testNS)); err != nil {
				return err
			}
			for _, s := range list.Items {
				if s.Spec.Metadata["probe"] != probe {
					continue
				}
				if s.Spec.Source.Template != defaultTpl {
					t.Fatalf("%q ran template %q, want the team's default %q", id, s.Spec.Source.Template, defaultTpl)
				}
				return nil
			}
			return fmt.Errorf("none among %d", len(list.Items))
		})
	}
	for _, name := range []string{"base", "code-interpreter-v1"} {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name}, &sandlotv1.Template{}); err == nil {
			t.Fatalf("team-c's public %q was copied into %s", name, testNS)
		}
	}
	own := &sandlotv1.Template{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: defaultTpl}, own); err != nil ||
		own.Annotations[AnnotationPublicSource] != "" {
		t.Fatalf("the team's default template: %v %v", err, own.Annotations)
	}
}
