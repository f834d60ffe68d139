package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// TestTemplateBuildAPI walks the SDK's Template().build() calls against
// the real API server: name a build, upload a COPY step's files through
// the signed link, start the build (a Template with spec.build), then
// read its status and logs as the controller and node agent report them.
func TestTemplateBuildAPI(t *testing.T) {
	f := setup(t)
	req := decode[map[string]any](t, f.api(t, "POST", "/v3/templates", map[string]any{"name": "built", "cpuCount": 2, "memoryMB": 256}), http.StatusAccepted)
	buildID, _ := req["buildID"].(string)
	if req["templateID"] != "built" || !regexp.MustCompile(`^[0-9a-f]{16}-2x256$`).MatchString(buildID) {
		t.Fatalf("POST /v3/templates = %v", req)
	}
	hash := strings.Repeat("ab", 32)
	link := decode[map[string]any](t, f.api(t, "GET", "/templates/built/files/"+hash, nil), http.StatusCreated)
	up, _ := link["url"].(string)
	if link["present"] != false || !strings.Contains(up, uploadPrefix+"built/"+hash) {
		t.Fatalf("upload link = %v", link)
	}
	u, err := url.Parse(up)
	if err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(u.RequestURI(), "sig=", "sig=00", 1)
	call(t, f.url, "PUT", forged, "x").wantError(t, http.StatusForbidden, "not valid")
	otherTeam := strings.Replace(u.RequestURI(), "team="+testNS, "team=kube-system", 1)
	call(t, f.url, "PUT", otherTeam, "x").wantError(t, http.StatusForbidden, "not valid")
	call(t, f.url, "PUT", u.RequestURI(), strings.Repeat("x", maxFilesBytes+1)).wantError(t, http.StatusRequestEntityTooLarge, "KiB")
	if r := call(t, f.url, "PUT", u.RequestURI(), "the tar"); r.code != http.StatusOK {
		t.Fatalf("PUT to the upload link: %d %s", r.code, r.body)
	}
	again := decode[map[string]any](t, f.api(t, "GET", "/templates/built/files/"+hash, nil), http.StatusCreated)
	if again["present"] != true {
		t.Fatalf("after the upload, the link = %v, want present", again)
	}

	steps := []map[string]any{{"type": "ENV", "args": []string{"GREETING", "hi"}}, {"type": "WORKDIR", "args": []string{"/app"}},
		{"type": "COPY", "args": []string{"hello.txt", "/app/", "", ""}, "filesHash": hash, "forceUpload": false},
		{"type": "RUN", "args": []string{"echo built > marker", "root"}}}
	start := "/v2/templates/built/builds/" + buildID
	refuseBadBuilds(t, f, start)
	f.api(t, "POST", "/v2/templates/built/builds/0123456789abcdef-1x1", map[string]any{"fromImage": "img"}).wantError(t, http.StatusNotFound, "not requested")
	if r := f.api(t, "POST", start, map[string]any{"fromImage": "registry.example/base:1", "steps": steps, "startCmd": "serve", "readyCmd": "true"}); r.code != http.StatusAccepted {
		t.Fatalf("start the build: %d %s", r.code, r.body)
	}
	tpl := &sandlotv1.Template{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: "built"}, tpl); err != nil {
		t.Fatal(err)
	}
	b := tpl.Spec.Build
	if tpl.Spec.Image != "registry.example/base:1" || tpl.Spec.Resources != (sandlotv1.Resources{VCPU: 2, MemoryMiB: 256}) ||
		b == nil || b.ID != buildID || len(b.Steps) != 4 || b.Steps[2].FilesHash != hash || b.StartCmd != "serve" {
		t.Fatalf("the Template = %+v, build %+v", tpl.Spec, b)
	}
	checkBuildStatus(t, f, tpl, buildID)
	// A delete answers once the API's cache shows it: the SDK's next
	// request does not find the template.
	if r := f.api(t, "DELETE", "/templates/built", nil); r.code != http.StatusNoContent {
		t.Fatalf("DELETE the template: %d %s", r.code, r.body)
	}
	f.api(t, "GET", "/templates/aliases/built", nil).wantError(t, http.StatusNotFound, "")
}

// checkBuildStatus plays the controller and the node agent: a failed base
// with its log, then reads the status as the SDK polls it.
func checkBuildStatus(t *testing.T, f *fixture, tpl *sandlotv1.Template, buildID string) {
	status := "/templates/built/builds/" + buildID + "/status"
	st := decode[map[string]any](t, f.api(t, "GET", status, nil), http.StatusOK)
	if st["status"] != "building" {
		t.Fatalf("before the controller saw it, status = %v", st)
	}
	builder := "built-base-x"
	var lines []string
	at := time.Now().UTC()
	for i := range 150 {
		lines = append(lines, fmt.Sprintf(`{"t":%q,"level":"info","msg":"line %d","step":4}`, at.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i))
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.BuildLogName(builder), Namespace: testNS},
		Data: map[string]string{sandlotv1.BuildLogKey: strings.Join(lines, "\n") + "\n"}}
	if err := f.c.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	msg := `step 4: "echo built > marker" exited with status 1: no space`
	tpl.Status = sandlotv1.TemplateStatus{ObservedGeneration: tpl.Generation, BaseRevision: "r1",
		BaseSnapshots: []sandlotv1.BaseSnapshot{{Node: "n1", Revision: "r1", Phase: sandlotv1.BaseFailed, Snapshot: builder, Reason: sandlotv1.ReasonBuildFailed, Message: msg}},
		Conditions: []metav1.Condition{{Type: sandlotv1.ConditionBaseSnapshotReady, Status: metav1.ConditionFalse, Reason: sandlotv1.ReasonBuildFailed,
			Message: msg, ObservedGeneration: tpl.Generation, LastTransitionTime: metav1.Now()}}}
	if err := f.c.Status().Update(context.Background(), tpl); err != nil {
		t.Fatal(err)
	}
	if err := poll.Within(10*time.Second, "the status in the server's cache", func() error {
		got := &sandlotv1.Template{}
		if err := f.kube.Get(context.Background(), client.ObjectKeyFromObject(tpl), got); err != nil {
			return err
		}
		if got.ResourceVersion != tpl.ResourceVersion {
			return fmt.Errorf("resourceVersion %s, want %s", got.ResourceVersion, tpl.ResourceVersion)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	first := decode[map[string]any](t, f.api(t, "GET", status, nil), http.StatusOK)
	second := decode[map[string]any](t, f.api(t, "GET", status+"?logsOffset=100", nil), http.StatusOK)
	reason, _ := first["reason"].(map[string]any)
	if first["status"] != "error" || reason["step"] != "4" || reason["message"] != msg || len(first["logEntries"].([]any)) != 100 ||
		len(second["logEntries"].([]any)) != 50 {
		t.Fatalf("status = %v / %v", first, second)
	}
	logs := decode[map[string]any](t, f.api(t, "GET", "/templates/built/builds/"+buildID+"/logs?direction=backward&limit=2", nil), http.StatusOK)
	if got := fmt.Sprint(logs["logs"]); !strings.Contains(got, "line 149") || strings.Contains(got, "line 147") {
		t.Fatalf("newest two log lines = %s", got)
	}
	f.api(t, "GET", "/templates/built/builds/0123456789abcdef-1x1/status", nil).wantError(t, http.StatusNotFound, "current build")
	decode[map[string]any](t, f.api(t, "GET", "/templates/aliases/built", nil), http.StatusOK)
	f.api(t, "GET", "/templates/aliases/nope", nil).wantError(t, http.StatusNotFound, "not found")
}

// refuseBadBuilds: what the builder would not run is refused by name
// before a Template is written.
func refuseBadBuilds(t *testing.T, f *fixture, start string) {
	bad := map[string]struct {
		body any
		msg  string
	}{
		"no base":            {map[string]any{"steps": []map[string]any{}}, "exactly one of fromImage and fromTemplate"},
		"an aws registry":    {map[string]any{"fromImage": "img", "fromImageRegistry": map[string]any{"type": "aws", "awsAccessKeyId": "k"}}, `type "aws" is not supported`},
		"a registry alone":   {map[string]any{"fromTemplate": "nope", "fromImageRegistry": map[string]any{"type": "registry", "username": "u", "password": "p"}}, "goes with fromImage"},
		"no password":        {map[string]any{"fromImage": "img", "fromImageRegistry": map[string]any{"type": "registry", "username": "u"}}, "both username and password"},
		"an unknown step":    {map[string]any{"fromImage": "img", "steps": []map[string]any{{"type": "ADD", "args": []string{"a", "b"}}}}, `step type "ADD"`},
		"files not uploaded": {map[string]any{"fromImage": "img", "steps": []map[string]any{{"type": "COPY", "args": []string{"a", "/b"}, "filesHash": strings.Repeat("cd", 32)}}}, "were not uploaded"},
		"an odd ENV":         {map[string]any{"fromImage": "img", "steps": []map[string]any{{"type": "ENV", "args": []string{"A"}}}}, "name, value pairs"},
		"no such base":       {map[string]any{"fromTemplate": "nope"}, "no such template"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) { f.api(t, "POST", start, tc.body).wantError(t, http.StatusBadRequest, tc.msg) })
	}
}

// TestBuildResourcesWithinTheOperatorsMaximum: a build asking for more
// than the operator allows is refused naming the limit (row 10's 64 vCPU
// and 256 GiB build); without a maximum a Template's bounds hold.
func TestBuildResourcesWithinTheOperatorsMaximum(t *testing.T) {
	capped := &Server{cfg: Config{MaxBuildVCPU: 8, MaxBuildMemoryMiB: 16384}}
	open := &Server{}
	for _, tc := range []struct {
		s         *Server
		cpu, mem  int32
		wantError string
	}{
		{capped, 0, 0, ""},
		{capped, 8, 16384, ""},
		{capped, 64, 512, "cpuCount 64 is above this API's maximum of 8 vCPU a sandbox (the operator's api.buildResources.maxVCPU)"},
		{capped, 2, 262144, "memoryMB 262144 is above this API's maximum of 16384 MiB"},
		{capped, 2, 32, "memoryMB 64..16384"},
		{capped, -1, 0, "cpuCount must be 1..8"},
		{open, 64, 262144, ""},
		{open, 65, 512, "maximum of 64 vCPU"},
	} {
		err := tc.s.checkBuildResources(tc.cpu, tc.mem)
		switch {
		case tc.wantError == "" && err != nil:
			t.Errorf("%d vCPU, %d MiB: refused (%s), want accepted", tc.cpu, tc.mem, err.Message)
		case tc.wantError != "" && (err == nil || err.Code != http.StatusBadRequest || !strings.Contains(err.Message, tc.wantError)):
			t.Errorf("%d vCPU, %d MiB: %v, want 400 %q", tc.cpu, tc.mem, err, tc.wantError)
		}
	}
}

// TestBuildFromAPrivateRegistry: the SDK's fromImage(image, {username,
// password}) becomes a pull Secret of the team's namespace for that
// registry, named by the template's spec.imagePullSecrets and owned by
// the template; the credentials appear nowhere else.
func TestBuildFromAPrivateRegistry(t *testing.T) {
	f := setup(t)
	req := decode[map[string]any](t, f.api(t, "POST", "/v3/templates", map[string]any{"name": "private-app"}), http.StatusAccepted)
	buildID, _ := req["buildID"].(string)
	image := "registry.example:5000/team/app:1"
	body := map[string]any{"fromImage": image, "fromImageRegistry": map[string]any{"type": "registry", "username": "bot", "password": "hunter2"}}
	if r := f.api(t, "POST", "/v2/templates/private-app/builds/"+buildID, body); r.code != http.StatusAccepted {
		t.Fatalf("start a build from a private registry: %d %s", r.code, r.body)
	}
	tpl := &sandlotv1.Template{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: "private-app"}, tpl); err != nil {
		t.Fatal(err)
	}
	if len(tpl.Spec.ImagePullSecrets) != 1 || tpl.Spec.ImagePullSecrets[0].Name != "private-app-registry" {
		t.Fatalf("template pulls with %v, want its registry Secret", tpl.Spec.ImagePullSecrets)
	}
	if raw, _ := json.Marshal(tpl); strings.Contains(string(raw), "hunter2") {
		t.Fatalf("the template holds the password: %s", raw)
	}
	sec := &corev1.Secret{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: "private-app-registry"}, sec); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(sec.Data[corev1.DockerConfigJsonKey], &cfg); err != nil || sec.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("pull secret %s of type %s: %v", sec.Data, sec.Type, err)
	}
	if a := cfg.Auths["registry.example:5000"]; a.Username != "bot" || a.Password != "hunter2" || a.Auth != "Ym90Omh1bnRlcjI=" {
		t.Fatalf("pull secret auths %+v, want bot's for registry.example:5000", cfg.Auths)
	}
	if !metav1.IsControlledBy(sec, tpl) {
		t.Fatalf("pull secret owners %v, want the template", sec.OwnerReferences)
	}
}
