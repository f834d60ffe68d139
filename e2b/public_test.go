package e2b

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

const teamC = "team-c"

// TestPublicTemplates: the fixture's team publishes a template (with a
// COPY step) through PATCH; team-c sees it, and its create makes team-c's
// own copy (spec and files) whose sandbox is team-c's; the copy follows
// the source's changes and keeps its own warm pool; once unpublished the
// copy is refused. Before publishing, and for a private template named
// by a forged copy annotation, team-c gets 404 and nothing copied.
func TestPublicTemplates(t *testing.T) {
	f := setup(t)
	base, keyC, k := teamServer(t, f, teamC, Config{CreateTimeout: 2 * time.Second})
	ctx := context.Background()
	hash := "0123456789abcdef0123"
	files := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.BuildFilesName(hash), Namespace: testNS,
		Annotations: map[string]string{sandlotv1.AnnotationFilesHash: hash}}, BinaryData: map[string][]byte{sandlotv1.BuildFilesKey: []byte("tar")}}
	src := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: testNS}, Spec: sandlotv1.TemplateSpec{
		Image: "registry.example/python:3.12", Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}, WarmPool: 3,
		Build: &sandlotv1.TemplateBuild{Steps: []sandlotv1.BuildStep{{Type: sandlotv1.StepRun, Args: []string{"echo hi > /m"}},
			{Type: sandlotv1.StepCopy, Args: []string{"a", "/a"}, FilesHash: hash}}}}}
	private := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "private", Namespace: testNS},
		Spec: sandlotv1.TemplateSpec{Image: "registry.example/secret:1"}}
	for _, o := range []client.Object{files, src, private} {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	createC := func(id string) reply {
		return call(t, base, "POST", "/v2/sandboxes", map[string]any{"templateID": id}, "X-API-KEY", keyC)
	}
	createC("shared").wantError(t, http.StatusNotFound, "no public template")
	call(t, base, "PATCH", "/templates/shared", map[string]any{"public": true}, "X-API-KEY", keyC).wantError(t, http.StatusNotFound, "not found")
	if r := call(t, base, "PATCH", "/v2/templates/shared", map[string]any{"public": true}, "X-API-KEY", f.key); r.code != http.StatusOK {
		t.Fatalf("publish: %d %s", r.code, r.body)
	}
	seenLabel(t, k, src, "true")
	listed := decode[[]templateJSON](t, call(t, base, "GET", "/templates", nil, "X-API-KEY", keyC), http.StatusOK)
	if !hasPublic(listed, "shared", testNS+"/shared") || hasPublic(listed, "private", "") {
		t.Fatalf("team-c lists %+v; want shared (public) and not private", listed)
	}

	// Published, it is still not team-c's "shared": only its owner's name reaches it.
	createC("shared").wantError(t, http.StatusNotFound, "<namespace>/<name>")
	call(t, base, "GET", "/templates/shared", nil, "X-API-KEY", keyC).wantError(t, http.StatusNotFound, "not found")
	createInC(t, f, base, keyC, testNS+"/shared", "shared")
	mirror := &sandlotv1.Template{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: teamC, Name: "shared"}, mirror); err != nil {
		t.Fatalf("team-c's copy: %v", err)
	}
	want := *src.Spec.DeepCopy()
	want.WarmPool = 0
	if !equality.Semantic.DeepEqual(mirror.Spec, want) || mirror.Annotations[AnnotationPublicSource] != testNS+"/shared/"+string(src.UID) {
		t.Fatalf("team-c's copy: %+v %v; want the source's spec without its pool", mirror.Spec, mirror.Annotations)
	}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: teamC, Name: files.Name}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the COPY step's files in team-c: %v", err)
	}
	call(t, base, "PATCH", "/templates/shared", map[string]any{"public": false}, "X-API-KEY", keyC).
		wantError(t, http.StatusBadRequest, "its owner publishes it")

	// The source changes; team-c's copy follows and keeps its own pool.
	mirror.Spec.WarmPool = 2
	src.Spec.Build.Steps = append(src.Spec.Build.Steps, sandlotv1.BuildStep{Type: sandlotv1.StepRun, Args: []string{"true"}})
	for _, o := range []client.Object{mirror, src} {
		if err := f.c.Update(ctx, o); err != nil {
			t.Fatal(err)
		}
		waitVersion(t, k, o)
	}
	createC("shared").wantError(t, http.StatusGatewayTimeout, "")
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(mirror), mirror); err != nil || len(mirror.Spec.Build.Steps) != 3 || mirror.Spec.WarmPool != 2 {
		t.Fatalf("team-c's copy after the source changed: %+v (%v); want 3 steps and its pool of 2", mirror.Spec, err)
	}

	if r := call(t, base, "PATCH", "/templates/shared", map[string]any{"public": false}, "X-API-KEY", f.key); r.code != http.StatusOK {
		t.Fatalf("unpublish: %d %s", r.code, r.body)
	}
	seenLabel(t, k, src, "")
	createC("shared").wantError(t, http.StatusNotFound, "no longer public")
	call(t, base, "GET", "/templates/shared", nil, "X-API-KEY", keyC).wantError(t, http.StatusNotFound, "no longer public")
	createC(testNS+"/shared").wantError(t, http.StatusNotFound, "no public template")
	createC("kube-system/shared").wantError(t, http.StatusNotFound, "no public template")

	// A copy annotation written by team-c itself opens nothing private.
	forged := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: teamC,
		Annotations: map[string]string{AnnotationPublicSource: testNS + "/private/" + string(private.UID)}},
		Spec: sandlotv1.TemplateSpec{Image: "registry.example/mine:1"}}
	if err := f.c.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	if err := waitCached(k, forged); err != nil {
		t.Fatal(err)
	}
	createC("forged").wantError(t, http.StatusNotFound, "no longer public")
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(forged), forged); err != nil || forged.Spec.Image != "registry.example/mine:1" {
		t.Fatalf("the forged copy: %+v (%v); want it untouched", forged.Spec, err)
	}
}

// TestReservedNamesNotPublished: a team's template named like one of the
// operator's (an SDK default ID) is its own, and may not be published.
func TestReservedNamesNotPublished(t *testing.T) {
	f := setup(t)
	const team = "team-r"
	base, key, k := teamServer(t, f, team, Config{CreateTimeout: 2 * time.Second})
	squat := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "base", Namespace: team},
		Spec: sandlotv1.TemplateSpec{Image: "registry.example/evil:1"}}
	if err := f.c.Create(context.Background(), squat); err != nil {
		t.Fatal(err)
	}
	if err := waitCached(k, squat); err != nil {
		t.Fatal(err)
	}
	call(t, base, "PATCH", "/templates/base", map[string]any{"public": true}, "X-API-KEY", key).
		wantError(t, http.StatusBadRequest, "reserved by the operator")
}

// createInC creates a sandbox of id with team-c's key and checks it is a
// Sandbox of team-c naming team-c's template tpl (a sandbox restores only
// its own namespace's templates); the create then times out (envtest
// runs no controller).
func createInC(t *testing.T, f *fixture, base, key, id, tpl string) {
	t.Helper()
	ch := make(chan reply, 1)
	go func() {
		r, err := send(base, "POST", "/v2/sandboxes", map[string]any{"templateID": id}, "X-API-KEY", key)
		if err != nil {
			t.Errorf("POST /v2/sandboxes: %v", err)
		}
		ch <- r
	}()
	poll.Eventually(t, 10*time.Second, "team-c's sandbox of "+tpl, func() error {
		list := &sandlotv1.SandboxList{}
		if err := f.c.List(context.Background(), list, client.InNamespace(teamC)); err != nil {
			return err
		}
		for _, s := range list.Items {
			if s.Spec.Source.Template == tpl {
				return nil
			}
		}
		return fmt.Errorf("none among %d", len(list.Items))
	})
	receive(t, ch, 15*time.Second).wantError(t, http.StatusGatewayTimeout, "")
}

func hasPublic(list []templateJSON, id, name string) bool {
	for _, t := range list {
		if t.TemplateID == id && t.Public && (name == "" || strings.Contains(strings.Join(t.Names, ","), name)) {
			return true
		}
	}
	return false
}

// seenLabel checks that the API's cache holds tpl's public label as want
// the moment the PATCH answered (the API waits for its own write).
func seenLabel(t *testing.T, k *Kube, tpl *sandlotv1.Template, want string) {
	t.Helper()
	got := &sandlotv1.Template{}
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(tpl), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[sandlotv1.LabelPublic] != want {
		t.Fatalf("the API answered the PATCH before its cache saw it: label %q, want %q", got.Labels[sandlotv1.LabelPublic], want)
	}
	tpl.ResourceVersion = got.ResourceVersion
	tpl.Labels = got.Labels
}

// waitVersion waits until the server's cache holds o as written.
func waitVersion(t *testing.T, k *Kube, o client.Object) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, fmt.Sprintf("%s %s as written in the cache", o.GetObjectKind().GroupVersionKind().Kind, o.GetName()), func() error {
		got := o.DeepCopyObject().(client.Object)
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(o), got); err != nil {
			return err
		}
		if got.GetResourceVersion() != o.GetResourceVersion() {
			return fmt.Errorf("resourceVersion %s, want %s", got.GetResourceVersion(), o.GetResourceVersion())
		}
		return nil
	})
}
