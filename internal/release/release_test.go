package release

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/sandlot-dev/sandlot/internal/oci"
)

const chartDir = "../../charts/sandlot"

func chartVersion(t *testing.T) string {
	t.Helper()
	ch, err := chartutil.LoadChartfile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return ch.AppVersion
}

func changelog(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "CHANGELOG.md")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	v := chartVersion(t)
	good := "# Changelog\n\n## [Unreleased]\n\n### Upgrading\n- nothing\n\n## [" + v + "] - 2026-12-06\n\n### Upgrading\n- none\n"
	cases := []struct {
		name, version, changelog, want string
	}{
		{"ok", v, good, ""},
		{"not semver", "1.2", good, "want a semantic version"},
		{"a v prefix", "v" + v, good, "want a semantic version"},
		{"not the chart's", "9.9.9", strings.ReplaceAll(good, v, "9.9.9"), "Chart.yaml has version " + v},
		{"no section", v, "# Changelog\n\n## [Unreleased]\n", "no \"## [" + v + "]\" section"},
		{"no upgrading note", v, "## [" + v + "] - x\n\n### Added\n- x\n\n## [0.0.1]\n\n### Upgrading\n- y\n", "no \"### Upgrading\" note"},
		{"a later section's note", v, "## [" + v + "]\n\n### Added\n\n## [0.0.9]\n### Upgrading\n", "no \"### Upgrading\" note"},
	}
	for _, c := range cases {
		err := Check(Inputs{Version: c.version, Chart: chartDir, Changelog: changelog(t, c.changelog)})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestMake: the folder holds the images, the chart packaged at the
// release's version, the plugin, and sums sha256sum -c accepts.
func TestMake(t *testing.T) {
	v := chartVersion(t)
	images := t.TempDir()
	for _, name := range Images {
		_, err := oci.WriteArchive(filepath.Join(images, name+".tar"), "docker.io/sandlot/"+name+":"+v, oci.Config{},
			func(w io.Writer) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	plugin := filepath.Join(t.TempDir(), "kubectl-sandlot")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "dist")
	in := Inputs{Version: v, Chart: chartDir, Images: images, Plugin: plugin,
		Changelog: changelog(t, "## ["+v+"]\n### Upgrading\n- none\n")}
	files, err := Make(in, out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sandlot-controller-" + v + ".oci.tar", "sandlot-api-" + v + ".oci.tar", "sandlot-agent-" + v + ".oci.tar",
		"sandlot-" + v + ".tgz", "kubectl-sandlot-linux-amd64", "SHA256SUMS"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Errorf("files %v, want %v", files, want)
	}
	ch, err := loader.Load(filepath.Join(out, "sandlot-"+v+".tgz"))
	if err != nil || ch.Metadata.Version != v || ch.AppVersion() != v {
		t.Fatalf("packaged chart: %v, %+v", err, ch)
	}
	cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
	cmd.Dir = out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if b, err := cmd.Output(); err != nil || strings.Count(string(b), ": OK") != 5 {
		t.Errorf("sha256sum -c: %v: %s%s", err, b, stderr.String())
	}
	in.Version = "0.0.0-bad"
	if _, err := Make(in, out); err == nil {
		t.Error("a version unlike the chart's made a release")
	}
	if _, err := os.Stat(filepath.Join(out, "SHA256SUMS")); err != nil {
		t.Errorf("a refused release removed the folder: %v", err)
	}
}
