package e2b

import (
	"context"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/kube"
)

const teamB = "team-b"

// teamServer is a server of the fixture's namespace and team, run as the
// chart's sandlot-api with api.teams = [team] and cfg, and a key of team.
func teamServer(t *testing.T, f *fixture, team string, cfg Config) (base, keyB string, k *Kube) {
	t.Helper()
	_, base, keyB, k = teamServerOf(t, f, team, cfg)
	return base, keyB, k
}

// teamServerOf is teamServer, with the Server (a test calls its methods).
func teamServerOf(t *testing.T, f *fixture, team string, cfg Config) (srv *Server, base, keyB string, k *Kube) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}}
	if err := f.c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	objs, err := kube.ChartRBAC(map[string]any{"api": map[string]any{"teams": []any{team}}})
	if err == nil {
		err = kube.ApplyRBAC(ctx, f.c, objs)
	}
	if err != nil {
		t.Fatal(err)
	}
	keyB, _ = NewAPIKey()
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sandlot-api-keys-" + team, Namespace: testNS,
		Labels: map[string]string{LabelTeam: team}}, StringData: map[string]string{"b": keyB}}
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: defaultTpl, Namespace: team},
		Spec: sandlotv1.TemplateSpec{Image: "registry.example/python:3.12"}}
	for _, o := range []client.Object{keys, tpl} {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := f.env.ComponentConfig("sandlot-api")
	if err != nil {
		t.Fatal(err)
	}
	if k, err = NewKube(ctx, rc, testNS, team); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{keys, tpl} {
		if err := waitCached(k, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Teams = []string{team}
	srv, hs := newTestServer(k, cfg)
	t.Cleanup(hs.Close)
	return srv, hs.URL, keyB, k
}

// TestTeams: two keys of two teams. Neither lists, reads, connects to,
// pauses or kills the other's sandbox (404, as for one that does not
// exist); each lists its own; /teams names the key's team; a create over
// the team's ResourceQuota answers 429 with the limit.
func TestTeams(t *testing.T) {
	f := setup(t)
	base, keyB, k := teamServer(t, f, teamB, Config{})
	ctx := context.Background()
	ids := map[string]string{}
	for _, ns := range []string{testNS, teamB} {
		sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-", Namespace: ns},
			Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: defaultTpl}}}
		if err := f.c.Create(ctx, sbx); err != nil {
			t.Fatal(err)
		}
		if err := waitCached(k, sbx); err != nil {
			t.Fatal(err)
		}
		ids[ns] = sandlotv1.SandboxIDFor(sbx.UID)
	}
	keys := map[string]string{testNS: f.key, teamB: keyB}
	for team, key := range keys {
		other := map[string]string{testNS: teamB, teamB: testNS}[team]
		for _, req := range [][2]string{{"GET", "/sandboxes/%s"}, {"DELETE", "/sandboxes/%s"}, {"POST", "/sandboxes/%s/pause"},
			{"POST", "/sandboxes/%s/connect"}, {"POST", "/sandboxes/%s/timeout"}, {"GET", "/v2/sandboxes/%s/logs"}} {
			path := strings.Replace(req[1], "%s", ids[other], 1)
			var body any // only the routes that take a timeout get one
			if strings.HasSuffix(path, "/connect") || strings.HasSuffix(path, "/timeout") {
				body = map[string]any{"timeout": 60}
			}
			call(t, base, req[0], path, body, "X-API-KEY", key).wantError(t, http.StatusNotFound, "not found")
		}
		r := call(t, base, "GET", "/v2/sandboxes", nil, "X-API-KEY", key)
		if r.code != http.StatusOK || !strings.Contains(string(r.body), ids[team]) || strings.Contains(string(r.body), ids[other]) {
			t.Fatalf("team %s lists %d %s; want its own %s and not %s", team, r.code, r.body, ids[team], ids[other])
		}
		if got := call(t, base, "GET", "/sandboxes/"+ids[team], nil, "X-API-KEY", key); got.code != http.StatusOK {
			t.Fatalf("team %s reads its own sandbox: %d %s", team, got.code, got.body)
		}
		teams := decode[[]map[string]any](t, call(t, base, "GET", "/teams", nil, "X-API-KEY", key), http.StatusOK)
		if len(teams) != 1 || teams[0]["teamID"] != team {
			t.Fatalf("team %s: /teams = %v", team, teams)
		}
	}
	quotaOf(t, f, teamB, 1)
	r := call(t, base, "POST", "/v2/sandboxes", map[string]any{"templateID": "base"}, "X-API-KEY", keyB)
	r.wantError(t, http.StatusTooManyRequests, "count/sandboxes.sandlot.dev=1")
	// A key whose Secret names a team the server does not serve opens nothing.
	stray, _ := NewAPIKey()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stray-keys", Namespace: testNS,
		Labels: map[string]string{LabelTeam: "kube-system"}}, StringData: map[string]string{"x": stray}}
	if err := f.c.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if err := waitCached(k, sec); err != nil {
		t.Fatal(err)
	}
	call(t, base, "GET", "/v2/sandboxes", nil, "X-API-KEY", stray).wantError(t, http.StatusUnauthorized, "invalid API key")
}

// quotaOf limits ns to n sandboxes, all in use. envtest runs no quota
// controller, so the status the admission plugin reads is written here.
func quotaOf(t *testing.T, f *fixture, ns string, n int64) {
	t.Helper()
	name := corev1.ResourceName("count/sandboxes.sandlot.dev")
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{name: *resource.NewQuantity(n, resource.DecimalSI)}}}
	ctx := context.Background()
	if err := f.c.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{name: *resource.NewQuantity(n, resource.DecimalSI)}}
	if err := f.c.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
}
