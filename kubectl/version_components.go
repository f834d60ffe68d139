package kubectl

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// componentVersion is one running component's own report: its binary
// run with --version in its pod (the images are FROM scratch: the binary
// is all there is to run).
type componentVersion struct {
	Component string `json:"component"`
	Pod       string `json:"pod"`
	Node      string `json:"node,omitempty"`
	Version   string `json:"version"`
	Error     string `json:"error,omitempty"`
}

// componentBinary is a binary to ask, in a container of a component's pod.
type componentBinary struct {
	component, container, path string
}

// componentBinaries are the chart's components (app.kubernetes.io/name)
// and what each pod runs; the agent's image carries the shim it installs.
var componentBinaries = map[string][]componentBinary{
	"sandlot-controller": {{"sandlot-controller", "controller", "/sandlot-controller"}},
	"sandlot-api":        {{"sandlot-api", "api", "/sandlot-api"}},
	"sandlot-agent": {{"sandlot-agent", "agent", "/sandlot-agent"},
		{"containerd-shim-sandlot-v2", "agent", "/opt/sandlot/bin/containerd-shim-sandlot-v2"}},
}

// componentTimeout bounds one --version exec.
const componentTimeout = 20 * time.Second

// componentVersions asks every running pod of the release in ns.
func (s *session) componentVersions(ctx context.Context, ns string) ([]componentVersion, error) {
	pods := &corev1.PodList{}
	if err := s.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/part-of": "sandlot"}); err != nil {
		return nil, fmt.Errorf("list sandlot's pods in %s: %w", ns, err)
	}
	var out []componentVersion
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
			continue
		}
		for _, b := range componentBinaries[pod.Labels[controllerLabel]] {
			v := componentVersion{Component: b.component, Pod: pod.Name, Node: pod.Spec.NodeName, Version: unknown}
			reported, err := s.askVersion(ctx, pod, b)
			if err != nil {
				v.Error = err.Error()
			} else {
				v.Version = reported
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// askVersion runs `<path> --version` in the pod's container and reads
// the version from its line ("<binary> <version> (...)").
func (s *session) askVersion(ctx context.Context, pod *corev1.Pod, b componentBinary) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, componentTimeout)
	defer cancel()
	p := &execPlan{ns: pod.Namespace, pod: pod.Name, opts: corev1.PodExecOptions{
		Container: b.container, Command: []string{b.path, "--version"}, Stdout: true, Stderr: true}}
	var stdout, stderr bytes.Buffer
	err := s.execStreams(ctx, p, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return "", fmt.Errorf("%s --version: %w%s", b.path, err, trailer(stderr.String()))
	}
	return parseVersionLine(stdout.String())
}

// versionWord is a stamped version: semver, or "dev" for a plain build.
var versionWord = regexp.MustCompile(`^(dev|v?[0-9]+\.[0-9]+\.[0-9]+[-+.0-9A-Za-z]*)$`)

// parseVersionLine reads the version out of internal/version's line.
func parseVersionLine(line string) (string, error) {
	fields := strings.Fields(line)
	if len(fields) < 2 || !versionWord.MatchString(fields[1]) {
		return "", fmt.Errorf("no version in %q", strings.TrimSpace(line))
	}
	return fields[1], nil
}

func trailer(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return ""
	}
	return ": " + s
}

// line is the component's line in `version`'s output.
func (c componentVersion) line(client string) string {
	where := "pod " + c.Pod
	if c.Node != "" {
		where += " on " + c.Node
	}
	s := fmt.Sprintf("%s Version: %s (%s)", c.Component, c.Version, where)
	switch {
	case c.Error != "":
		s += ": " + c.Error
	case c.Version != client:
		s += ": differs from the plugin's " + client
	}
	return s
}
