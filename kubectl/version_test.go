package kubectl

import (
	"context"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestBuildVersion(t *testing.T) {
	defer func(f func() (*debug.BuildInfo, bool), v string) { readBuildInfo, releaseVersion = f, v }(readBuildInfo, releaseVersion)
	cases := []struct {
		release string
		info    *debug.BuildInfo
		want    string
	}{
		{"0.2.0", &debug.BuildInfo{GoVersion: "go1.26.6", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "06bb926aaaaa"}, {Key: "vcs.modified", Value: "true"}}},
			"0.2.0 (revision 06bb926aaaaa, modified; built with go1.26.6)"},
		{"0.2.0", &debug.BuildInfo{GoVersion: "go1.26.6", Main: debug.Module{Version: "v0.2.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			"0.2.0 (revision abc; built with go1.26.6)"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"", &debug.BuildInfo{}, "unknown"},
		{"0.2.0", nil, "unknown"},
	}
	for _, c := range cases {
		readBuildInfo = func() (*debug.BuildInfo, bool) { return c.info, c.info != nil }
		releaseVersion = c.release
		if got := buildVersion().String(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestParseVersionLine(t *testing.T) {
	got, err := parseVersionLine("sandlot-agent 0.2.0 (go1.26.8, linux/amd64)\n")
	if err != nil || got != "0.2.0" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := parseVersionLine("flag provided but not defined: -version\n"); err == nil {
		t.Error("a line without a version parsed")
	}
	if _, err := parseVersionLine(""); err == nil {
		t.Error("no output parsed")
	}
}

func TestComponentLine(t *testing.T) {
	cases := map[string]componentVersion{
		"sandlot-agent Version: 0.2.0 (pod a on n1)":                                 {Component: "sandlot-agent", Pod: "a", Node: "n1", Version: "0.2.0"},
		"sandlot-api Version: 0.1.0 (pod b): differs from the plugin's 0.2.0":        {Component: "sandlot-api", Pod: "b", Version: "0.1.0"},
		"sandlot-api Version: unknown (pod b): pods \"b\" is forbidden: cannot exec": {Component: "sandlot-api", Pod: "b", Version: "unknown", Error: `pods "b" is forbidden: cannot exec`},
	}
	for want, c := range cases {
		if got := c.line("0.2.0"); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestImageTag(t *testing.T) {
	for ref, want := range map[string]string{
		"sandlot/sandlot-controller:0.1.0":   "0.1.0",
		"registry:5000/sandlot/controller":   "latest",
		"registry:5000/controller:v2":        "v2",
		"controller@sha256:abc":              "sha256:abc",
		"controller:v1@sha256:abc":           "v1",
		"docker.io/library/controller:1.2.3": "1.2.3",
		"":                                   "unknown",
	} {
		if got := imageTag(ref); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestVersionReadsTheServerAndTheController(t *testing.T) {
	f, ns := setup(t)
	dc, err := discovery.NewDiscoveryClientForConfig(f.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	server, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}

	out := f.ok(t, ns, "version").out
	contains(t, "version", out, "Client Version: ", "Server Version: "+server.GitVersion+"\n",
		"Controller Version: unknown (no Deployment labelled app.kubernetes.io/name=sandlot-controller)")

	labels := map[string]string{"app.kubernetes.io/name": "sandlot-controller"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "sandlot-controller", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "sidecar", Image: "busybox:1"},
					{Name: "controller", Image: "sandlot/sandlot-controller:0.3.1"}}}}}}
	c, err := client.New(f.env.Config, client.Options{Scheme: scheme}) // the fixture's knows no Deployments
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	// version looks in every namespace: leave none for a rerun.
	t.Cleanup(func() { _ = c.Delete(context.Background(), d) })
	out = f.ok(t, ns, "version").out
	contains(t, "version", out, "Controller Version: 0.3.1 (sandlot/sandlot-controller:0.3.1 in Deployment "+ns+"/sandlot-controller)")

	var v versionInfo
	if err := json.Unmarshal([]byte(f.ok(t, ns, "version", "-o", "json").out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Server != server.GitVersion || v.Controller != "0.3.1" || v.ControllerFrom != ns+"/sandlot-controller" || v.Client.Version == "" {
		t.Errorf("version -o json: %+v", v)
	}
	contains(t, "version -o yaml", f.ok(t, ns, "version", "-o", "yaml").out, "controllerVersion: 0.3.1", "clientVersion:")

	// --client asks no server: it works without one.
	out, err = runLocal("version", "--client")
	if err != nil || !strings.HasPrefix(out, "Client Version: ") || strings.Contains(out, "Server") {
		t.Errorf("version --client: %v\n%s", err, out)
	}
	_, err = runLocal("version")
	wantError(t, err, "load kubeconfig")
}
