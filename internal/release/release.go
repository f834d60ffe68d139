// Package release makes a release folder (make release): the images as
// OCI archives, the packaged chart, the kubectl plugin and SHA256SUMS,
// after checking the version is the one the chart and the CHANGELOG
// name; and pushes the images to a registry (oras-go, not by hand).
package release

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/sandlot-dev/sandlot/internal/oci"
)

// Images are the release's images (hack/images writes <name>.tar).
var Images = []string{"sandlot-controller", "sandlot-api", "sandlot-agent"}

// Repository is the images' repository under a registry (the chart's
// default repositories).
const Repository = "sandlot/"

// Inputs are what a release is made from.
type Inputs struct {
	Version   string // x.y.z, as the chart's version and appVersion
	Chart     string // charts/sandlot
	Changelog string // CHANGELOG.md
	Images    string // the image archives (make image): <name>.tar
	Plugin    string // the kubectl plugin binary (make build)
}

// Make checks in and writes the release folder out (made afresh) and
// returns its files, SHA256SUMS last.
func Make(in Inputs, out string) ([]string, error) {
	if err := Check(in); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, name := range Images {
		dst := fmt.Sprintf("%s-%s.oci.tar", name, in.Version)
		if err := copyFile(filepath.Join(in.Images, name+".tar"), filepath.Join(out, dst), 0o644); err != nil {
			return nil, fmt.Errorf("image %s: %w (make image)", name, err)
		}
		files = append(files, dst)
	}
	ch, err := loader.Load(in.Chart)
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	tgz, err := chartutil.Save(ch, out)
	if err != nil {
		return nil, fmt.Errorf("package the chart: %w", err)
	}
	files = append(files, filepath.Base(tgz))
	plugin := "kubectl-sandlot-linux-amd64"
	if err := copyFile(in.Plugin, filepath.Join(out, plugin), 0o755); err != nil {
		return nil, fmt.Errorf("plugin: %w (make build)", err)
	}
	files = append(files, plugin)
	if err := writeSums(out, files); err != nil {
		return nil, err
	}
	return append(files, "SHA256SUMS"), nil
}

// Check refuses a release whose version is not semantic, differs from
// the chart's version or appVersion, or has no CHANGELOG section with an
// upgrading note.
func Check(in Inputs) error {
	v, err := semver.StrictNewVersion(in.Version)
	if err != nil {
		return fmt.Errorf("VERSION %q: want a semantic version x.y.z: %w", in.Version, err)
	}
	ch, err := chartutil.LoadChartfile(filepath.Join(in.Chart, "Chart.yaml"))
	if err != nil {
		return fmt.Errorf("read the chart: %w", err)
	}
	if ch.Version != v.String() || ch.AppVersion != v.String() {
		return fmt.Errorf("VERSION %s: charts/sandlot/Chart.yaml has version %s, appVersion %s: set both to %s (every binary and image is stamped with appVersion)",
			v, ch.Version, ch.AppVersion, v)
	}
	return checkChangelog(in.Changelog, v.String())
}

// versionHeading is a CHANGELOG section: "## [x.y.z] - date".
var versionHeading = regexp.MustCompile(`^## \[([^\]]+)\]`)

// checkChangelog wants a "## [version]" section holding an "### Upgrading"
// subsection: what an operator does (or that nothing is needed) to move
// from the previous release.
func checkChangelog(path, version string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	defer f.Close()
	in, upgrading := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := versionHeading.FindStringSubmatch(line); m != nil {
			if in {
				break
			}
			in = m[1] == version
			continue
		}
		upgrading = upgrading || (in && strings.HasPrefix(line, "### Upgrading"))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	switch {
	case !in:
		return fmt.Errorf("%s has no \"## [%s]\" section: say what the release changes", path, version)
	case !upgrading:
		return fmt.Errorf("%s: section [%s] has no \"### Upgrading\" note: say what an upgrade from the previous release needs", path, version)
	}
	return nil
}

// Push pushes the release folder's images to registry (host[:port][/path])
// as <registry>/sandlot/<name>:<version>; plainHTTP for a registry
// without TLS. It returns each reference with its digest.
func Push(ctx context.Context, dir, version, registry string, plainHTTP bool) ([]string, error) {
	var pushed []string
	for _, name := range Images {
		ref := strings.TrimSuffix(registry, "/") + "/" + Repository + name + ":" + version
		digest, err := oci.Push(ctx, filepath.Join(dir, fmt.Sprintf("%s-%s.oci.tar", name, version)), ref, plainHTTP)
		if err != nil {
			return pushed, err
		}
		pushed = append(pushed, ref+"@"+digest)
	}
	return pushed, nil
}

// writeSums writes SHA256SUMS in sha256sum's format (sha256sum -c reads it).
func writeSums(dir string, files []string) error {
	var b strings.Builder
	for _, name := range slices.Sorted(slices.Values(files)) {
		sum, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, name)
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
