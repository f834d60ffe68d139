package chart

import (
	"context"
	"os"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/test/kube"
)

// TestHelmUpgradePath: on a real API server (envtest, no nodes: nothing
// waits for pods), helm install, then helm upgrade to a chart whose CRD
// gained a field applies it; an upgrade from a release older than the
// chart's sandlot.dev/upgrade-from is refused by name, as is a downgrade
// to an older minor unless upgrade.allowDowngrade; uninstall keeps the
// CRDs and a second install takes them over.
func TestHelmUpgradePath(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make envtest-assets` and the tests with `make test-unit` or `make test-chart`")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig, err := (&kube.Env{Environment: env, Config: cfg}).Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hc, err := cluster.HelmConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ch := loadOrFail(t)
	install := action.NewInstall(hc)
	install.ReleaseName, install.Namespace, install.CreateNamespace = cluster.ReleaseName, namespace, true
	if _, err := install.Run(ch, nil); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	upgraded := withSandboxField(t, loadOrFail(t), "upgradeProbe")
	if err := upgrade(hc, upgraded, nil); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if !sandboxCRDHas(t, c, "upgradeProbe") {
		t.Error("helm upgrade did not apply the CRD's new field")
	}
	refusals(t, hc, ch.AppVersion())
	uninstallKeepsCRDs(t, hc, c)
}

// refusals: a chart that upgrades only from a later release, and a chart
// of an older minor, are refused with the reason; the downgrade passes
// with upgrade.allowDowngrade.
func refusals(t *testing.T, hc *action.Configuration, running string) {
	later := loadOrFail(t)
	later.Metadata.Annotations["sandlot.dev/upgrade-from"] = "99.0.0"
	err := upgrade(hc, later, nil)
	if err == nil || !strings.Contains(err.Error(), "upgrade from sandlot "+running+" refused: this chart") {
		t.Errorf("an upgrade skipping a required release: %v", err)
	}
	older := loadOrFail(t)
	older.Metadata.AppVersion, older.Metadata.Annotations["sandlot.dev/upgrade-from"] = "0.0.9", "0.0.1"
	err = upgrade(hc, older, nil)
	if err == nil || !strings.Contains(err.Error(), "downgrade from sandlot "+running+" to 0.0.9 refused") {
		t.Errorf("a downgrade to an older minor: %v", err)
	}
	if err := upgrade(hc, older, map[string]any{"upgrade": map[string]any{"allowDowngrade": true}}); err != nil {
		t.Errorf("a downgrade with upgrade.allowDowngrade: %v", err)
	}
}

func uninstallKeepsCRDs(t *testing.T, hc *action.Configuration, c client.Client) {
	if _, err := action.NewUninstall(hc).Run(cluster.ReleaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "sandboxes.sandlot.dev"}, crd); err != nil {
		t.Fatalf("the Sandbox CRD after helm uninstall: %v", err)
	}
	install := action.NewInstall(hc)
	install.ReleaseName, install.Namespace = cluster.ReleaseName, namespace
	if _, err := install.Run(withSandboxField(t, loadOrFail(t), "reinstallProbe"), nil); err != nil {
		t.Fatalf("helm install over the kept CRDs: %v", err)
	}
	if !sandboxCRDHas(t, c, "reinstallProbe") {
		t.Error("the second install did not take the kept CRDs over")
	}
}

func upgrade(hc *action.Configuration, ch *chart.Chart, vals map[string]any) error {
	up := action.NewUpgrade(hc)
	up.Namespace = namespace
	_, err := up.Run(cluster.ReleaseName, ch, vals)
	return err
}

func loadOrFail(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loadChart()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// withSandboxField adds a string field to the Sandbox CRD's spec in the
// chart's copy (files/crds/), as a release that adds a field does.
func withSandboxField(t *testing.T, ch *chart.Chart, field string) *chart.Chart {
	t.Helper()
	for _, f := range ch.Files {
		if f.Name != "files/crds/sandlot.dev_sandboxes.yaml" {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(f.Data, crd); err != nil {
			t.Fatal(err)
		}
		for i := range crd.Spec.Versions {
			spec := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
			spec.Properties[field] = apiextensionsv1.JSONSchemaProps{Type: "string"}
			crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		}
		b, err := yaml.Marshal(crd)
		if err != nil {
			t.Fatal(err)
		}
		f.Data = b
		return ch
	}
	t.Fatal("the chart has no files/crds/sandlot.dev_sandboxes.yaml")
	return nil
}

func sandboxCRDHas(t *testing.T, c client.Client, field string) bool {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "sandboxes.sandlot.dev"}, crd); err != nil {
		t.Fatal(err)
	}
	_, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties[field]
	return ok
}
