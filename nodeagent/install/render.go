// Package install puts sandlot's node-side pieces on a node and takes
// them off again: the shim binary, the guest kernel and initramfs, the
// shim's JSON config and the containerd drop-in that registers the
// `sandlot` runtime. `sandlot-agent install` and `sandlot-agent
// uninstall` (the Helm chart's init container and preStop hook) run it
// with the host's / mounted somewhere; tests run it on a temp dir.
package install

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"text/template"

	nodeapi "github.com/sandlot-dev/sandlot/api/node"
)

// RuntimeName is the runtime handler (the RuntimeClass's handler).
const RuntimeName = "sandlot"

// DropIn is what the containerd drop-in says about the runtime.
type DropIn struct {
	// ConfigPath is the shim's JSON config on the host (the runtime's
	// ConfigPath option).
	ConfigPath string
	// RuntimePath, when set, is the shim binary's absolute path
	// (runtime_path), for hosts whose containerd PATH lacks it.
	RuntimePath string
}

// dropInTemplate is the runtime table internal/crienv registers for the
// cluster tests, line for line, in a version 3 file: containerd 2.x
// migrates each imported file by its own version before merging, and
// these plugin names are version 3's.
var dropInTemplate = template.Must(template.New("dropin").Parse(`# Written by sandlot-agent install: the sandlot runtime (RuntimeClass handler sandlot).
# sandlot-agent uninstall removes it. Do not edit: the next install rewrites it.
version = 3

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.sandlot]
  runtime_type = 'io.containerd.sandlot.v2'
  sandboxer = 'podsandbox'
  pod_annotations = ['sandlot.dev/*']
{{- if .RuntimePath}}
  runtime_path = '{{.RuntimePath}}'
{{- end}}
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.sandlot.options]
    ConfigPath = '{{.ConfigPath}}'
`))

// RenderDropIn renders the containerd drop-in registering the runtime.
func RenderDropIn(d DropIn) ([]byte, error) {
	if err := tomlPath("ConfigPath", d.ConfigPath, true); err != nil {
		return nil, err
	}
	if err := tomlPath("runtime_path", d.RuntimePath, false); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := dropInTemplate.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("render containerd drop-in: %w", err)
	}
	return b.Bytes(), nil
}

// tomlPath checks that p is absolute and fits a TOML literal string
// (no quote, no control character): the template does not escape.
func tomlPath(name, p string, required bool) error {
	if p == "" && !required {
		return nil
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%s %q: want an absolute path", name, p)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r == '\'' || r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%s %q: quotes and control characters are not supported", name, p)
	}
	return nil
}

// RenderShimConfig renders the shim's node config (nodeapi.Config as JSON),
// refusing what the shim would refuse at its first pod: missing kernel
// or initramfs, relative paths.
func RenderShimConfig(c nodeapi.Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("shim config: %w", err)
	}
	return append(b, '\n'), nil
}
