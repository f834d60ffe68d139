package kubectl

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandlot-dev/sandlot/internal/version"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The controller's Deployment: its label, and the chart's release
// namespace, looked in when listing across namespaces is not allowed.
const (
	controllerLabel     = "app.kubernetes.io/name"
	controllerName      = "sandlot-controller"
	controllerNamespace = "sandlot-system"
)

// unknown is said of a version that could not be found.
const unknown = "unknown"

// versionInfo is what `version` prints (its -o json|yaml form).
type versionInfo struct {
	Client          clientVersion `json:"clientVersion"`
	Server          string        `json:"serverVersion,omitempty"`
	Controller      string        `json:"controllerVersion,omitempty"`
	ControllerImage string        `json:"controllerImage,omitempty"`
	ControllerFrom  string        `json:"controllerDeployment,omitempty"`
	// Components are the running pods' own reports (--version).
	Components        []componentVersion `json:"components,omitempty"`
	controllerMissing string             // why the controller's version is unknown
}

// clientVersion is the plugin's build: the release version the build
// stamped (internal/version) and the VCS revision Go stamped.
type clientVersion struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"revisionTime,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion,omitempty"`
}

// readBuildInfo is debug.ReadBuildInfo (tests replace it).
var readBuildInfo = debug.ReadBuildInfo

// releaseVersion is the stamped version (tests replace it).
var releaseVersion = version.Version

func buildVersion() clientVersion {
	info, ok := readBuildInfo()
	if !ok {
		return clientVersion{Version: unknown}
	}
	v := clientVersion{Version: cmp.Or(releaseVersion, unknown), GoVersion: info.GoVersion}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v clientVersion) String() string {
	var parts []string
	if v.Revision != "" {
		rev := "revision " + v.Revision
		if v.Modified {
			rev += ", modified"
		}
		parts = append(parts, rev)
	}
	if v.GoVersion != "" {
		parts = append(parts, "built with "+v.GoVersion)
	}
	if len(parts) == 0 {
		return v.Version
	}
	return v.Version + " (" + strings.Join(parts, "; ") + ")"
}

type versionOptions struct {
	clientOnly bool
	output     string
}

func (r *root) versionCmd() *cobra.Command {
	o := &versionOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version, the API server's and the sandlot controller's",
		Long: "version prints the plugin's build (its release version and VCS revision), the kube-apiserver's\n" +
			"version, the image tag of the sandlot-controller Deployment (labelled " + controllerLabel + "=" + controllerName + ";\n" +
			"\"unknown\" when none can be read) and what each running sandlot pod in its namespace reports:\n" +
			"the controller, the API, each node's agent and the shim it installs, each asked with --version\n" +
			"(needs pods/exec there; a component that cannot be asked says why).",
		Example:           "  kubectl sandlot version\n  kubectl sandlot version --client\n  kubectl sandlot version -o json",
		Args:              args(0, 0, "no arguments"),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              func(cmd *cobra.Command, _ []string) error { return r.version(cmd, o) },
	}
	cmd.Flags().BoolVar(&o.clientOnly, "client", false, "the plugin's version only (no API server contacted)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: lines when empty, or one of: json, yaml.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, noFiles))
	return cmd
}

func (r *root) version(cmd *cobra.Command, o *versionOptions) error {
	if o.output != "" && o.output != "json" && o.output != "yaml" {
		return errUsage(cmd, "unknown output format %q: allowed: json, yaml", o.output)
	}
	v := versionInfo{Client: buildVersion()}
	var serverErr error
	if !o.clientOnly {
		serverErr = r.serverVersions(cmd.Context(), &v)
	}
	if err := printVersion(r.streams.Out, o.output, &v); err != nil {
		return err
	}
	return serverErr
}

// serverVersions fills in the API server's version and the controller's.
func (r *root) serverVersions(ctx context.Context, v *versionInfo) error {
	s, err := r.session()
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(s.cfg)
	if err != nil {
		return fmt.Errorf("connect to the API server: %w", err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("read the API server's version: %w", err)
	}
	v.Server = info.GitVersion
	v.Controller, v.controllerMissing = unknown, "no Deployment labelled "+controllerLabel+"="+controllerName
	d, err := s.controllerDeployment(ctx)
	switch {
	case err != nil:
		v.controllerMissing = err.Error()
	case d != nil:
		v.ControllerImage = controllerImage(d)
		v.Controller, v.ControllerFrom, v.controllerMissing = imageTag(v.ControllerImage), d.Namespace+"/"+d.Name, ""
		v.Components, err = s.componentVersions(ctx, d.Namespace)
	}
	return err
}

// controllerDeployment finds the controller's Deployment: in any
// namespace, or in the chart's release namespace for a user who may
// not list them all; nil when there is none.
func (s *session) controllerDeployment(ctx context.Context) (*appsv1.Deployment, error) {
	list := &appsv1.DeploymentList{}
	sel := client.MatchingLabels{controllerLabel: controllerName}
	if err := s.c.List(ctx, list, sel); err != nil {
		if err2 := s.c.List(ctx, list, sel, client.InNamespace(controllerNamespace)); err2 != nil {
			return nil, fmt.Errorf("list Deployments: %w", err)
		}
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	slices.SortFunc(list.Items, func(a, b appsv1.Deployment) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return &list.Items[0], nil
}

// controllerImage is the image of the Deployment's container named
// controller (the chart's), or of its first.
func controllerImage(d *appsv1.Deployment) string {
	cs := d.Spec.Template.Spec.Containers
	for _, c := range cs {
		if c.Name == "controller" {
			return c.Image
		}
	}
	if len(cs) == 0 {
		return ""
	}
	return cs[0].Image
}

// imageTag is an image reference's tag; its digest when it has none,
// and latest when it has neither.
func imageTag(ref string) string {
	if ref == "" {
		return unknown
	}
	name, digest, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	if digest != "" {
		return digest
	}
	return "latest"
}

func printVersion(w io.Writer, format string, v *versionInfo) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	fmt.Fprintf(w, "Client Version: %s\n", v.Client)
	if v.Server != "" {
		fmt.Fprintf(w, "Server Version: %s\n", v.Server)
	}
	switch {
	case v.ControllerFrom != "":
		fmt.Fprintf(w, "Controller Version: %s (%s in Deployment %s)\n", v.Controller, v.ControllerImage, v.ControllerFrom)
	case v.Controller != "":
		fmt.Fprintf(w, "Controller Version: %s (%s)\n", v.Controller, v.controllerMissing)
	}
	for _, c := range v.Components {
		fmt.Fprintf(w, "%s\n", c.line(v.Client.Version))
	}
	return nil
}
