package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// unknownID is a well-formed sandbox ID no sandbox has.
const unknownID = "zzzzzzzzzzzzzzzzzzzz"

// TestAuth: every route of routes() (and the catch-all) needs a valid
// X-API-KEY; /health needs none.
func TestAuth(t *testing.T) {
	f := setup(t)
	t.Parallel()
	id := unknownID
	routes := []string{
		"POST /sandboxes", "POST /v2/sandboxes", "GET /sandboxes", "GET /v2/sandboxes",
		"GET /sandboxes/" + id, "DELETE /sandboxes/" + id, "POST /sandboxes/" + id + "/timeout",
		"POST /sandboxes/" + id + "/refreshes", "POST /sandboxes/" + id + "/pause", "POST /sandboxes/" + id + "/resume",
		"POST /sandboxes/" + id + "/connect", "POST /v2/sandboxes/" + id + "/connect", "POST /sandboxes/" + id + "/snapshots",
		"POST /sandboxes/" + id + "/fork", "POST /sandboxes/" + id + "/rollback", "GET /sandboxes/" + id + "/metrics",
		"PUT /sandboxes/" + id + "/network", "GET /snapshots", "GET /templates", "GET /templates/" + defaultTpl, "DELETE /templates/" + defaultTpl,
		"POST /templates", "POST /v2/templates", "POST /v3/templates",
		"POST /v2/templates/x/builds/y", "GET /templates/x/files/" + strings.Repeat("a", 64), "GET /templates/x/builds/y/status",
		"GET /templates/x/builds/y/logs", "GET /templates/aliases/x", "GET /no/such/route", "PUT /v2/sandboxes",
	}
	wrongKey, err := NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range routes {
		method, path, _ := strings.Cut(route, " ")
		call(t, f.url, method, path, `{"templateID":"base"}`).wantError(t, http.StatusUnauthorized, "missing X-API-KEY")
		call(t, f.url, method, path, `{"templateID":"base"}`, "X-API-KEY", wrongKey).wantError(t, http.StatusUnauthorized, "invalid API key")
	}
	// Upload links are signed instead: one without a signature is refused.
	call(t, f.url, "PUT", uploadPrefix+"x/"+strings.Repeat("a", 64)+"?team="+testNS, "data").wantError(t, http.StatusForbidden, "not valid")
	if r := call(t, f.url, "GET", "/health", nil); r.code != http.StatusOK || len(r.body) != 0 {
		t.Errorf("GET /health without a key: %d %q, want 200", r.code, r.body)
	}
	// The template DELETE above was refused: it is still there.
	tpls := decode[[]templateJSON](t, f.api(t, "GET", "/templates", nil), http.StatusOK)
	if !slices.ContainsFunc(tpls, func(tj templateJSON) bool { return tj.TemplateID == defaultTpl }) {
		t.Errorf("GET /templates with the key: %+v lacks %s", tpls, defaultTpl)
	}
}

// TestCreate: a create blocks until the sandbox is usable (VM ready and
// token Secret), then answers 201 with its ID and token; the Sandbox
// carries what the request asked.
// Longer than 60 lines: one request per step of a scenario, read in order.
func TestCreate(t *testing.T) {
	f := setup(t)
	t.Parallel()
	snapshot := "snap-" + randomID()
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: snapshot, Namespace: testNS},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "some-sandbox"}}}
	if err := f.c.Create(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	if err := waitCached(f.kube, snap); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		templateID string
		extra      map[string]any // more request fields
		source     sandlotv1.SandboxSource
		check      func(t *testing.T, sbx *sandlotv1.Sandbox, id string)
	}{
		{name: "default template with options", templateID: "base",
			extra: map[string]any{"timeout": 600, "autoPause": true, "autoResume": map[string]bool{"enabled": true},
				"envVars": map[string]string{"B": "2", "A": "1"}},
			source: sandlotv1.SandboxSource{Template: defaultTpl},
			check: func(t *testing.T, sbx *sandlotv1.Sandbox, id string) {
				spec := sbx.Spec
				if len(spec.Env) != 2 || spec.Env[0] != (sandlotv1.EnvVar{Name: "A", Value: "1"}) || spec.Env[1] != (sandlotv1.EnvVar{Name: "B", Value: "2"}) {
					t.Errorf("env = %+v, want A=1, B=2", spec.Env)
				}
				if spec.TimeoutSeconds == nil || *spec.TimeoutSeconds != 600 || spec.OnTimeout != sandlotv1.TimeoutPause {
					t.Errorf("timeoutSeconds %v, onTimeout %q, want 600 and Pause", spec.TimeoutSeconds, spec.OnTimeout)
				}
				if sbx.Annotations[AnnotationAutoResume] != "true" || sbx.Annotations[AnnotationTemplateID] != "base" {
					t.Errorf("annotations = %v", sbx.Annotations)
				}
				d := decode[sandboxDetail](t, f.api(t, "GET", "/sandboxes/"+id, nil), http.StatusOK)
				if d.SandboxID != id || d.State != "running" || d.CPUCount != 2 || d.MemoryMB != 1024 || d.EnvdAccessToken == "" ||
					d.Lifecycle == nil || *d.Lifecycle != (lifecycleJSON{OnTimeout: "pause", AutoResume: true}) || d.Metadata["who"] != "me" {
					t.Errorf("GET /sandboxes/%s = %+v", id, d)
				}
			}},
		{name: "snapshot", templateID: snapshot, source: sandlotv1.SandboxSource{Snapshot: snapshot},
			check: func(t *testing.T, sbx *sandlotv1.Sandbox, _ string) {
				if sbx.Spec.TimeoutSeconds != nil || sbx.Spec.OnTimeout == sandlotv1.TimeoutPause || sbx.Annotations[AnnotationAutoResume] != "" {
					t.Errorf("a plain create set lifecycle fields: %+v %v", sbx.Spec, sbx.Annotations)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mark := randomID()
			body := map[string]any{"templateID": tc.templateID, "metadata": map[string]string{"test": mark, "who": "me"}}
			for k, v := range tc.extra {
				body[k] = v
			}
			ch := f.createAsync(t, f.url, body)
			sbx := f.created(t, mark)
			if sbx.Spec.Source != tc.source || !strings.HasPrefix(sbx.Name, "e2b-") || sbx.Spec.Metadata["who"] != "me" {
				t.Errorf("Sandbox %s: source %+v, metadata %v; want source %+v", sbx.Name, sbx.Spec.Source, sbx.Spec.Metadata, tc.source)
			}
			pending(t, ch, 100*time.Millisecond, "the sandbox runs")
			f.setRunning(t, sbx, newPodIP("127.0.0.1:1"))
			pending(t, ch, 300*time.Millisecond, "the token Secret exists")
			token := f.createToken(t, sbx)
			got := decode[sandboxJSON](t, receive(t, ch, 10*time.Second), http.StatusCreated)
			id := sandlotv1.SandboxIDFor(sbx.UID)
			want := sandboxJSON{TemplateID: tc.templateID, SandboxID: id, ClientID: "sandlot", EnvdVersion: DefaultEnvdVersion,
				EnvdAccessToken: token, TrafficAccessToken: trafficToken(token), Domain: testDomain}
			if got != want {
				t.Errorf("create answered %+v, want %+v", got, want)
			}
			tc.check(t, sbx, id)
		})
	}
}

// TestCreateTimeout: a sandbox that never gets ready is a 504, and is deleted.
func TestCreateTimeout(t *testing.T) {
	f := setup(t)
	t.Parallel()
	_, hs := newTestServer(f.kube, Config{CreateTimeout: 2 * time.Second})
	t.Cleanup(hs.Close)
	mark := randomID()
	ch := f.createAsync(t, hs.URL, map[string]any{"templateID": "base", "metadata": map[string]string{"test": mark}})
	sbx := f.created(t, mark)
	receive(t, ch, 15*time.Second).wantError(t, http.StatusGatewayTimeout, "(the sandbox was deleted)")
	// The API created it with the controller's finalizer (no controller
	// runs here): deleted is what the API does; the controller ends it.
	if !slices.Contains(sbx.Finalizers, sandlotv1.FinalizerSandboxVM) {
		t.Errorf("created with finalizers %v, want %s", sbx.Finalizers, sandlotv1.FinalizerSandboxVM)
	}
	poll.Eventually(t, 10*time.Second, "the Sandbox is deleted", func() error {
		cur := &sandlotv1.Sandbox{}
		err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), cur)
		if apierrors.IsNotFound(err) || (err == nil && cur.DeletionTimestamp != nil) {
			return nil
		}
		return fmt.Errorf("not deleted (%v)", err)
	})
}

// TestBadInput: 4xx answers with JSON errors naming the problem; the
// server answers on afterwards.
func TestBadInput(t *testing.T) {
	f := setup(t)
	t.Parallel()
	tooMany := map[string]string{}
	for i := range maxMetadata + 1 {
		tooMany[fmt.Sprint("k", i)] = "v"
	}
	tests := []struct {
		name, method, path string
		body               any
		code               int
		msg                string
	}{
		{"malformed JSON", "POST", "/v2/sandboxes", `{"templateID":`, 400, "request body"},
		{"wrong type", "POST", "/v2/sandboxes", `{"templateID":"base","timeout":"ten"}`, 400, `field "timeout"`},
		{"trailing data", "POST", "/v2/sandboxes", `{"templateID":"base"}}`, 400, "data after the JSON value"},
		{"no templateID", "POST", "/v2/sandboxes", `{}`, 400, `field "templateID" is required`},
		{"bad env name", "POST", "/sandboxes", map[string]any{"templateID": "base", "envVars": map[string]string{"1X": "v"}}, 400, `"1X" is not a valid variable name`},
		{"too much metadata", "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "metadata": tooMany}, 400, `field "metadata": 65 entries`},
		{"body too large", "POST", "/v2/sandboxes", `{"templateID":"base","x":"` + strings.Repeat("a", maxTestBody) + `"}`, 413, "larger than"},
		{"unknown template", "POST", "/v2/sandboxes", `{"templateID":"no-such-template"}`, 404, `template "no-such-template" not found`},
		{"a field sandlot does not know", "POST", "/v2/sandboxes", `{"templateID":"base","iam":{"tokens":{}}}`, 400, `field "iam" is not supported`},
		{"filesystem-only auto-pause without autoPause", "POST", "/v2/sandboxes", `{"templateID":"base","autoPauseMemory":false}`, 400, `field "autoPauseMemory": false needs autoPause`},
		{"filesystem-only pause of an unknown sandbox", "POST", "/sandboxes/" + unknownID + "/pause", `{"memory":false}`, 404, "not found"},
		{"resume by reboot of an unknown sandbox", "POST", "/v2/sandboxes/" + unknownID + "/connect", `{"memory":false}`, 404, "not found"},
		{"unknown pause field", "POST", "/sandboxes/" + unknownID + "/pause", `{"keepMemory":true}`, 400, `field "keepMemory" is not supported`},
		{"GET unknown sandbox", "GET", "/sandboxes/" + unknownID, nil, 404, "not found"},
		{"GET malformed ID", "GET", "/sandboxes/Not-An-ID", nil, 404, "not found"},
		{"DELETE unknown sandbox", "DELETE", "/sandboxes/" + unknownID, nil, 404, "not found"},
		{"pause unknown sandbox", "POST", "/sandboxes/" + unknownID + "/pause", nil, 404, "not found"},
		{"timeout unknown sandbox", "POST", "/sandboxes/" + unknownID + "/timeout", `{"timeout":60}`, 404, "not found"},
		{"bad state filter", "GET", "/v2/sandboxes?state=dead", nil, 400, `query "state"`},
		{"bad limit", "GET", "/v2/sandboxes?limit=0", nil, 400, `query "limit"`},
		{"bad page token", "GET", "/v2/sandboxes?nextToken=x", nil, 400, `query "nextToken"`},
		{"bad metadata filter", "GET", "/v2/sandboxes?metadata=%3Dv", nil, 400, `query "metadata"`},
		{"bad order", "GET", "/v2/sandboxes?order=newest", nil, 400, `query "order"`},
		{"bad startedAfter", "GET", "/v2/sandboxes?startedAfter=yesterday", nil, 400, `query "startedAfter"`},
		{"unknown route", "GET", "/v9/nothing", nil, 404, "no route GET /v9/nothing"},
		{"wrong method", "PUT", "/v2/sandboxes", nil, 405, "method not allowed"},
		{"wrong method on an ID", "PATCH", "/sandboxes/" + unknownID, nil, 405, "method not allowed"},
		{"legacy template build", "POST", "/v2/templates", `{}`, 501, "Template().build()"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.api(t, tc.method, tc.path, tc.body).wantError(t, tc.code, tc.msg)
		})
	}
	if r := f.api(t, "GET", "/v2/sandboxes?limit=1", nil); r.code != http.StatusOK {
		t.Errorf("after bad input, GET /v2/sandboxes: %d %s", r.code, r.body)
	}
}

// sdkMetadata encodes a metadata filter as the JS SDK does:
// URLSearchParams of encodeURIComponent'd keys and values.
func sdkMetadata(m map[string]string) string {
	enc := func(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }
	v := url.Values{}
	for k, val := range m {
		v.Set(enc(k), enc(val))
	}
	return v.Encode()
}

// TestList: GET /v2/sandboxes (and the v1 list) filter by metadata and
// state, and page by X-Next-Token.
// Longer than 60 lines: one request per step of a scenario, read in order.
func TestList(t *testing.T) {
	f := setup(t)
	t.Parallel()
	mark := randomID()
	ids := make([]string, 5) // sandboxes 3 and 4 are paused; 1 has a metadata entry that needs encoding
	for n := range ids {
		sbx := f.makeSandbox(t, func(s *sandlotv1.Sandbox) {
			s.Spec.Metadata = map[string]string{"test": mark, "n": strconv.Itoa(n)}
			if n == 1 {
				s.Spec.Metadata["team name"] = "a&b=c/d%+é"
			}
			s.Spec.Paused = n >= 3
		})
		ids[n] = sandlotv1.SandboxIDFor(sbx.UID)
	}
	listed := func(t *testing.T, path string, filter map[string]string, q url.Values) ([]string, string) {
		t.Helper()
		q.Set("metadata", sdkMetadata(filter))
		r := f.api(t, "GET", path+"?"+q.Encode(), nil)
		var got []string
		for _, d := range decode[[]sandboxDetail](t, r, http.StatusOK) {
			got = append(got, d.SandboxID)
			if d.Metadata["test"] != mark || d.TemplateID != defaultTpl {
				t.Errorf("listed %+v", d)
			}
		}
		return got, r.header.Get("X-Next-Token")
	}
	mine := map[string]string{"test": mark}
	tests := []struct {
		name, path string
		filter     map[string]string
		query      url.Values
		want       []int
	}{
		{"all", "/v2/sandboxes", mine, url.Values{}, []int{0, 1, 2, 3, 4}},
		{"metadata", "/v2/sandboxes", map[string]string{"test": mark, "n": "2"}, url.Values{}, []int{2}},
		{"metadata to encode", "/v2/sandboxes", map[string]string{"test": mark, "team name": "a&b=c/d%+é"}, url.Values{}, []int{1}},
		{"metadata no match", "/v2/sandboxes", map[string]string{"test": mark, "n": "7"}, url.Values{}, nil},
		{"paused", "/v2/sandboxes", mine, url.Values{"state": {"paused"}}, []int{3, 4}},
		{"running", "/v2/sandboxes", mine, url.Values{"state": {"running"}}, []int{0, 1, 2}},
		{"both states", "/v2/sandboxes", mine, url.Values{"state": {"running,paused"}}, []int{0, 1, 2, 3, 4}},
		{"template", "/v2/sandboxes", mine, url.Values{"template": {"other"}}, nil},
		{"v1 lists running", "/sandboxes", mine, url.Values{}, []int{0, 1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, next := listed(t, tc.path, tc.filter, tc.query)
			var want []string
			for _, n := range tc.want {
				want = append(want, ids[n])
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) || next != "" {
				t.Errorf("listed %v (next token %q), want %v", got, next, want)
			}
		})
	}
	t.Run("order and startedAfter", func(t *testing.T) {
		desc, _ := listed(t, "/v2/sandboxes", mine, url.Values{})
		asc, _ := listed(t, "/v2/sandboxes", mine, url.Values{"order": {"asc"}})
		rev := slices.Clone(desc)
		slices.Reverse(rev)
		if len(desc) != len(ids) || !slices.Equal(asc, rev) {
			t.Errorf("newest first %v, oldest first %v: want one the other reversed", desc, asc)
		}
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		if got, _ := listed(t, "/v2/sandboxes", mine, url.Values{"startedAfter": {future}}); len(got) != 0 {
			t.Errorf("started after %s: %v, want none", future, got)
		}
		past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		if got, _ := listed(t, "/v2/sandboxes", mine, url.Values{"startedAfter": {past}}); len(got) != len(ids) {
			t.Errorf("started after %s: %v, want all %d", past, got, len(ids))
		}
	})
	t.Run("pages", func(t *testing.T) {
		var got []string
		var sizes []int
		for q := (url.Values{"limit": {"2"}}); ; {
			page, next := listed(t, "/v2/sandboxes", mine, q)
			got, sizes = append(got, page...), append(sizes, len(page))
			if next == "" {
				break
			}
			q.Set("nextToken", next)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(ids))
		if !slices.Equal(got, want) || !slices.Equal(sizes, []int{2, 2, 1}) {
			t.Errorf("pages of %v gave %v, want each of %v once", sizes, got, want)
		}
	})
}

// TestLifecycle: kill, pause of a paused sandbox, timeout.
func TestLifecycle(t *testing.T) {
	f := setup(t)
	t.Parallel()
	idOf := func(sbx *sandlotv1.Sandbox) string { return sandlotv1.SandboxIDFor(sbx.UID) }
	t.Run("kill", func(t *testing.T) {
		sbx := f.makeSandbox(t, nil)
		if r := f.api(t, "DELETE", "/sandboxes/"+idOf(sbx), nil); r.code != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("DELETE: %d %q, want 204", r.code, r.body)
		}
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); !apierrors.IsNotFound(err) {
			t.Errorf("after DELETE the Sandbox is still there: %v", err)
		}
		f.api(t, "DELETE", "/sandboxes/"+idOf(sbx), nil).wantError(t, http.StatusNotFound, "not found")
	})
	t.Run("pause a paused sandbox", func(t *testing.T) {
		sbx := f.makeSandbox(t, func(s *sandlotv1.Sandbox) { s.Spec.Paused = true })
		f.api(t, "POST", "/sandboxes/"+idOf(sbx)+"/pause", nil).wantError(t, http.StatusConflict, "already paused")
	})
	t.Run("resume a running sandbox", func(t *testing.T) {
		sbx := f.makeSandbox(t, nil)
		f.api(t, "POST", "/sandboxes/"+idOf(sbx)+"/resume", nil).wantError(t, http.StatusConflict, "already running")
	})
	t.Run("timeout", func(t *testing.T) {
		sbx := f.makeSandbox(t, nil)
		path := "/sandboxes/" + idOf(sbx) + "/timeout"
		f.api(t, "POST", path, `{}`).wantError(t, http.StatusBadRequest, `field "timeout" is required`)
		f.api(t, "POST", path, `{"timeout":-1}`).wantError(t, http.StatusBadRequest, `field "timeout": -1 is outside`)
		if r := f.api(t, "POST", path, `{"timeout":120}`); r.code != http.StatusNoContent {
			t.Fatalf("POST %s: %d %s, want 204", path, r.code, r.body)
		}
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
			t.Fatal(err)
		}
		// 120 s from now: the sandbox's age (a second or two) plus 120.
		if got := sbx.Spec.TimeoutSeconds; got == nil || *got < 120 || *got > 125 {
			t.Errorf("spec.timeoutSeconds = %v, want 120 s from now", got)
		}
		// The API reads its cache: each answer already shows the timeout
		// just set (as the SDK's setTimeout, then getInfo, expects).
		for _, secs := range []int{300, 60, 900, 30, 600} {
			if r := f.api(t, "POST", path, fmt.Sprintf(`{"timeout":%d}`, secs)); r.code != http.StatusNoContent {
				t.Fatalf("POST %s: %d %s, want 204", path, r.code, r.body)
			}
			got := decode[sandboxDetail](t, f.api(t, "GET", "/sandboxes/"+idOf(sbx), nil), http.StatusOK)
			end, err := time.Parse(time.RFC3339Nano, got.EndAt)
			if left := time.Until(end); err != nil || left < time.Duration(secs-5)*time.Second || left > time.Duration(secs+2)*time.Second {
				t.Errorf("after a timeout of %d s, GET says endAt %s (%v from now, %v)", secs, got.EndAt, left, err)
			}
		}
	})
}
