package e2b

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

const teamE = "team-e"

// uploader is a team's client of a server: its key and where it is.
type uploader struct {
	base, key string
}

func (u uploader) api(t *testing.T, method, path string, body any) reply {
	t.Helper()
	return call(t, u.base, method, path, body, "X-API-KEY", u.key)
}

// requestBuild is POST /v3/templates: the build ID.
func (u uploader) requestBuild(t *testing.T, tpl string) string {
	t.Helper()
	got := decode[map[string]any](t, u.api(t, "POST", "/v3/templates", map[string]any{"name": tpl}), http.StatusAccepted)
	return got["buildID"].(string)
}

// link asks for the upload link of hash for tpl, and returns its path.
func (u uploader) link(t *testing.T, tpl, hash string) string {
	t.Helper()
	got := decode[map[string]any](t, u.api(t, "GET", "/templates/"+tpl+"/files/"+hash, nil), http.StatusCreated)
	link, _ := got["url"].(string)
	parsed, err := url.Parse(link)
	if got["present"] != false || err != nil {
		t.Fatalf("link of %s for %s: %v", hash, tpl, got)
	}
	return parsed.RequestURI()
}

// upload PUTs size bytes to an upload link's path.
func (u uploader) upload(t *testing.T, path string, size int) reply {
	t.Helper()
	return call(t, u.base, "PUT", path, strings.Repeat("x", size))
}

func filesHashOf(c byte) string { return strings.Repeat(string(c), 64) }

// filesIn are the hashes of the build files (this API's) in ns.
func filesIn(t *testing.T, f *fixture, ns string) []string {
	t.Helper()
	list := &corev1.ConfigMapList{}
	if err := f.c.List(context.Background(), list, client.InNamespace(ns), client.HasLabels{sandlotv1.LabelBuildFiles}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, cm := range list.Items {
		out = append(out, cm.Annotations[sandlotv1.AnnotationFilesHash])
	}
	slices.Sort(out)
	return out
}

func wantFiles(t *testing.T, f *fixture, ns, when string, hashes ...string) {
	t.Helper()
	slices.Sort(hashes)
	if got := filesIn(t, f, ns); !slices.Equal(got, hashes) {
		t.Fatalf("%s: the build files are %v, want %v", when, got, hashes)
	}
}

// TestBuildFilesAttacker plays a team that would fill etcd with uploads:
// links for a template that does not exist, or another team's, are 404;
// past the team's bounds (3 files, 2500 bytes) a 429 names the bound; a
// link outliving its build is 404. The uploads go when their build ends
// (the one it copies stays until the template goes), or when they lapse;
// a next build finds the copied files present.
func TestBuildFilesAttacker(t *testing.T) {
	f := setup(t)
	srv, base, keyE, _ := teamServerOf(t, f, teamE, Config{MaxBuildFiles: 3, MaxBuildFilesBytes: 2500})
	e := uploader{base, keyE}
	ctx := context.Background()

	checkNotAwaited(t, f, e)

	buildID := e.requestBuild(t, "app")
	late := e.link(t, "app", filesHashOf('7')) // used after the build ends
	for _, c := range []byte{'1', '2'} {
		if r := e.upload(t, e.link(t, "app", filesHashOf(c)), 1000); r.code != http.StatusOK {
			t.Fatalf("upload %c: %d %s", c, r.code, r.body)
		}
	}
	fourth := e.link(t, "app", filesHashOf('4')) // while there is room for one
	e.upload(t, e.link(t, "app", filesHashOf('3')), 1000).wantError(t, http.StatusTooManyRequests, "--max-build-files-bytes) is 2500 bytes")
	if r := e.upload(t, e.link(t, "app", filesHashOf('3')), 100); r.code != http.StatusOK {
		t.Fatalf("upload 3 within the bounds: %d %s", r.code, r.body)
	}
	e.api(t, "GET", "/templates/app/files/"+filesHashOf('4'), nil).wantError(t, http.StatusTooManyRequests, "--max-build-files) is 3")
	e.upload(t, fourth, 10).wantError(t, http.StatusTooManyRequests, "--max-build-files) is 3")
	wantFiles(t, f, teamE, "at the bounds", filesHashOf('1'), filesHashOf('2'), filesHashOf('3'))

	tpl := startCopyBuild(t, f, e, "app", buildID, filesHashOf('1'))
	sweep(t, srv, time.Now())
	wantFiles(t, f, teamE, "while the build runs", filesHashOf('1'), filesHashOf('2'), filesHashOf('3'))
	endBuild(t, f, tpl)
	sweep(t, srv, time.Now())
	wantFiles(t, f, teamE, "once the build ended", filesHashOf('1'))
	e.upload(t, late, 10).wantError(t, http.StatusNotFound, "no build awaiting files")

	// The next build of the same files: present (the SDK's cache hit).
	next := e.requestBuild(t, "app")
	if got := decode[map[string]any](t, e.api(t, "GET", "/templates/app/files/"+filesHashOf('1'), nil), http.StatusCreated); got["present"] != true {
		t.Fatalf("the copied files for the next build: %v, want present", got)
	}
	startCopyBuild(t, f, e, "app", next, filesHashOf('1'))
	sweep(t, srv, time.Now())
	wantFiles(t, f, teamE, "while the next build copies them", filesHashOf('1'))
	if err := f.c.Delete(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	sweep(t, srv, time.Now())
	wantFiles(t, f, teamE, "once the template is deleted")
	checkLapse(t, f, srv, e)
}

// checkNotAwaited: no link, nor upload through a link the team signs
// itself, for a template that does not exist or another team's requested
// build.
func checkNotAwaited(t *testing.T, f *fixture, e uploader) {
	t.Helper()
	e.api(t, "GET", "/templates/ghost/files/"+filesHashOf('1'), nil).wantError(t, http.StatusNotFound, "no build awaiting files")
	decode[map[string]any](t, f.api(t, "POST", "/v3/templates", map[string]any{"name": "victim"}), http.StatusAccepted)
	e.api(t, "GET", "/templates/victim/files/"+filesHashOf('1'), nil).wantError(t, http.StatusNotFound, "no build awaiting files")
	for _, tpl := range []string{"ghost", "victim"} {
		exp := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
		forged := uploadPrefix + tpl + "/" + filesHashOf('1') + "?" + url.Values{"team": {teamE}, "exp": {exp},
			"sig": {uploadSignature(e.key, teamE, tpl, filesHashOf('1'), exp)}}.Encode()
		e.upload(t, forged, 10).wantError(t, http.StatusNotFound, "no build awaiting files")
	}
	wantFiles(t, f, teamE, "after the refused uploads")
}

// sweep runs srv's sweep of team-e's build files as at now.
func sweep(t *testing.T, srv *Server, now time.Time) {
	t.Helper()
	if err := srv.sweepBuilds(context.Background(), teamE, now); err != nil {
		t.Fatal(err)
	}
}

// startCopyBuild starts build buildID of tpl, a COPY of hash, and checks
// the files are the Template's (they go with it) and the request is gone.
func startCopyBuild(t *testing.T, f *fixture, u uploader, tpl, buildID, hash string) *sandlotv1.Template {
	t.Helper()
	steps := []map[string]any{{"type": "COPY", "args": []string{"a", "/a"}, "filesHash": hash}}
	if r := u.api(t, "POST", "/v2/templates/"+tpl+"/builds/"+buildID, map[string]any{"fromImage": "registry.example/base:1", "steps": steps}); r.code != http.StatusAccepted {
		t.Fatalf("start build %s: %d %s", buildID, r.code, r.body)
	}
	ctx := context.Background()
	got := &sandlotv1.Template{}
	files := &corev1.ConfigMap{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: teamE, Name: tpl}, got); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: teamE, Name: sandlotv1.BuildFilesName(hash)}, files); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(files.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == got.UID && o.Kind == "Template" }) {
		t.Errorf("the files' owners %+v do not name template %s", files.OwnerReferences, got.UID)
	}
	err := f.c.Get(ctx, client.ObjectKey{Namespace: teamE, Name: buildRequestName(tpl)}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the started build's request: %v, want it gone", err)
	}
	return got
}

// endBuild plays the controller: tpl's build is done.
func endBuild(t *testing.T, f *fixture, tpl *sandlotv1.Template) {
	t.Helper()
	setBase(tpl, sandlotv1.BaseReady)
	if err := f.c.Status().Update(context.Background(), tpl); err != nil {
		t.Fatal(err)
	}
}

// checkLapse: a build requested and never started, its upload, and the
// request go once they lapse; a link for it is 404 then.
func checkLapse(t *testing.T, f *fixture, srv *Server, u uploader) {
	t.Helper()
	ctx := context.Background()
	u.requestBuild(t, "abandoned")
	if r := u.upload(t, u.link(t, "abandoned", filesHashOf('6')), 10); r.code != http.StatusOK {
		t.Fatalf("upload for the abandoned build: %d %s", r.code, r.body)
	}
	sweep(t, srv, time.Now())
	wantFiles(t, f, teamE, "while the build is awaited", filesHashOf('6'))
	sweep(t, srv, time.Now().Add(buildFilesTTL+time.Minute))
	wantFiles(t, f, teamE, "once they lapsed")
	err := f.c.Get(ctx, client.ObjectKey{Namespace: teamE, Name: buildRequestName("abandoned")}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the lapsed request: %v, want it swept", err)
	}
	u.api(t, "GET", "/templates/abandoned/files/"+filesHashOf('6'), nil).wantError(t, http.StatusNotFound, "no build awaiting files")
}

// TestUploadRate: a team's upload links and uploads beyond its burst are
// 429 naming the limit, with Retry-After.
func TestUploadRate(t *testing.T) {
	f := setup(t)
	_, hs := newTestServer(f.kube, Config{MaxBodyBytes: maxTestBody, UploadRate: 0.01, UploadBurst: 2})
	t.Cleanup(hs.Close)
	u := uploader{hs.URL, f.key}
	u.requestBuild(t, "ratey")
	path := u.link(t, "ratey", filesHashOf('a'))
	if r := u.upload(t, path, 10); r.code != http.StatusOK {
		t.Fatalf("the second of a burst of 2: %d %s", r.code, r.body)
	}
	r := u.api(t, "GET", "/templates/ratey/files/"+filesHashOf('b'), nil)
	r.wantError(t, http.StatusTooManyRequests, "--upload-rate")
	if r.header.Get("Retry-After") == "" {
		t.Errorf("the 429 has no Retry-After")
	}
	u.upload(t, path, 10).wantError(t, http.StatusTooManyRequests, "upload links and uploads")
}
