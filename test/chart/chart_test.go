// Package chart tests the Helm chart charts/sandlot with the Helm SDK, no
// cluster: lint, renders per storage mode and runtime registration,
// the values schema, and that what it carries (CRDs, RBAC rules, the
// containerd drop-in) is what the rest of the repo generates and tests.
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../../charts/sandlot"
	namespace = "sandlot-system"
)

// kubeVersion is the cluster the chart is rendered for (the repo's).
var kubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

// modes are value sets the chart must take: each storage mode, and the
// local cluster's way (runtime registered already).
var modes = map[string]map[string]any{
	"local": {},
	"juicefs": {"storage": map[string]any{"mode": "juicefs",
		"juicefs": map[string]any{"storageClassName": "jfs-rwx", "stagingDir": "/var/jfsCache/uuid/rawstaging", "createStorageClass": true}}},
	"s3": {"storage": map[string]any{"mode": "s3",
		"s3": map[string]any{"endpoint": "minio.storage:9000", "bucket": "sandlot", "region": "us-east-1", "insecure": true,
			"accessKeyID": "AKIAEXAMPLE", "secretAccessKey": "secret"}}},
	"no runtime registration": {"agent": map[string]any{"registerRuntime": false}},
	// Everything for Prometheus and Grafana on: lint and render with it.
	"metrics on": {"metrics": map[string]any{"readers": []any{map[string]any{"name": "prometheus-k8s", "namespace": "monitoring"}},
		"serviceMonitor": map[string]any{"enabled": true}, "dashboard": map[string]any{"enabled": true},
		"alerts": map[string]any{"enabled": true}}},
}

func TestLint(t *testing.T) {
	for name, vals := range modes {
		t.Run(name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, vals, namespace, kubeVersion)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
		})
	}
}

// objects are a render's objects by kind and name.
type objects map[string]*unstructured.Unstructured

func key(kind, name string) string { return kind + "/" + name }

func (o objects) get(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	u, ok := o[key(kind, name)]
	if !ok {
		t.Fatalf("no %s %s rendered", kind, name)
	}
	return u
}

// into converts the object kind/name into a typed one.
func (o objects) into(t *testing.T, kind, name string, out any) {
	t.Helper()
	if err := fromUnstructured(o.get(t, kind, name).Object, out); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
}

func fromUnstructured(u map[string]any, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u, out)
}

func loadChart() (*chart.Chart, error) { return loader.Load(chartDir) }

// release renders the chart as `helm install --dry-run` would, without a
// cluster (schema validation included).
func release(vals map[string]any) (objects, string, error) {
	ch, err := loadChart()
	if err != nil {
		return nil, "", err
	}
	return renderChart(ch, vals)
}

func renderChart(ch *chart.Chart, vals map[string]any) (objects, string, error) {
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.IncludeCRDs = true, true, true
	inst.ReleaseName, inst.Namespace, inst.KubeVersion = "sandlot", namespace, kubeVersion
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, "", err
	}
	objs, err := decode(rel.Manifest)
	return objs, rel.Info.Notes, err
}

func render(t *testing.T, vals map[string]any) objects {
	t.Helper()
	objs, _, err := release(vals)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// decode reads a manifest strictly: a key twice in a map (two labels
// of the same name, say) is an error, as kubectl apply would make it.
func decode(manifest string) (objects, error) {
	objs := objects{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("%w in:\n%s", err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		k := key(u.GetKind(), u.GetName())
		if first, dup := objs[k]; dup && first.GetNamespace() != u.GetNamespace() {
			k += "@" + u.GetNamespace() // the same name in another namespace (a team's RoleBinding)
		}
		if _, dup := objs[k]; dup {
			return nil, errors.New("rendered twice: " + k)
		}
		objs[k] = u
	}
}

// readYAML decodes one YAML file of the repo.
func readYAML(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&u.Object); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return u
}

// merge returns base with over laid on it (maps merged, the rest replaced).
func merge(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if b, ok := out[k].(map[string]any); ok {
			if o, ok := v.(map[string]any); ok {
				out[k] = merge(b, o)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// TestChartFilesAreGenerated: the CRDs and role files the chart carries
// are byte for byte what `make manifests` put in config/.
func TestChartFilesAreGenerated(t *testing.T) {
	pairs := map[string]string{
		"files/controller-role.yaml": "../../config/rbac/role.yaml",
		"files/api-role.yaml":        "../../config/api/role.yaml",
	}
	bases, err := filepath.Glob("../../config/crd/bases/*.yaml")
	if err != nil || len(bases) == 0 {
		t.Fatalf("config/crd/bases: %v, %v", bases, err)
	}
	for _, b := range bases {
		pairs["files/crds/"+filepath.Base(b)] = b
	}
	inChart, _ := filepath.Glob(filepath.Join(chartDir, "files", "crds", "*.yaml"))
	if len(inChart) != len(bases) {
		t.Errorf("chart has %d CRDs, config/crd/bases %d: run make manifests", len(inChart), len(bases))
	}
	for inc, src := range pairs {
		a, errA := os.ReadFile(filepath.Join(chartDir, inc))
		b, errB := os.ReadFile(src)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("charts/sandlot/%s differs from %s (%v, %v): run make manifests", inc, src, errA, errB)
		}
	}
}
