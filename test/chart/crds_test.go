package chart

import (
	"path/filepath"
	"reflect"
	"testing"
)

// TestCRDsAreTemplates: the CRDs render as templates (helm upgrade
// applies them), the same schemas as config/crd/bases, kept on uninstall
// unless crds.keep is false, and absent with crds.install false.
func TestCRDsAreTemplates(t *testing.T) {
	bases, err := filepath.Glob("../../config/crd/bases/*.yaml")
	if err != nil || len(bases) != 5 {
		t.Fatalf("config/crd/bases: %v, %v", bases, err)
	}
	objs := render(t, nil)
	for _, b := range bases {
		want := readYAML(t, b)
		got, ok := objs[key("CustomResourceDefinition", want.GetName())]
		if !ok {
			t.Errorf("CRD %s not rendered", want.GetName())
			continue
		}
		if !reflect.DeepEqual(got.Object["spec"], want.Object["spec"]) {
			t.Errorf("CRD %s: the rendered spec differs from %s", want.GetName(), b)
		}
		if got.GetAnnotations()["helm.sh/resource-policy"] != "keep" || got.GetLabels()["app.kubernetes.io/part-of"] != "sandlot" {
			t.Errorf("CRD %s: annotations %v, labels %v: want kept, labelled", want.GetName(), got.GetAnnotations(), got.GetLabels())
		}
	}
	for _, o := range render(t, map[string]any{"crds": map[string]any{"keep": false}}) {
		if o.GetKind() == "CustomResourceDefinition" && o.GetAnnotations()["helm.sh/resource-policy"] != "" {
			t.Errorf("crds.keep=false: %s is kept", o.GetName())
		}
	}
	for _, o := range render(t, map[string]any{"crds": map[string]any{"install": false}}) {
		if o.GetKind() == "CustomResourceDefinition" {
			t.Errorf("crds.install=false: %s rendered", o.GetName())
		}
	}
}
