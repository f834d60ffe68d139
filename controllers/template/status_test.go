package template

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestValidateImageRef(t *testing.T) {
	for ref, ok := range map[string]bool{
		"python:3.12": true, "docker.io/library/python": true, "localhost:5000/a/b:v1": true,
		"py@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": true,
		"python::3": false, "-python": false, "python:": false, "py@sha256:short": false, "a//b": false,
	} {
		if err := validateImageRef(ref); (err == nil) != ok {
			t.Errorf("validateImageRef(%q) = %v, want ok=%v", ref, err, ok)
		}
	}
}

func TestTemplateStatus(t *testing.T) {
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: sandlotv1.TemplateSpec{Image: "python:3"}}
	st := templateStatus(tpl)
	acc := condition(st.Conditions, sandlotv1.ConditionAccepted)
	base := condition(st.Conditions, sandlotv1.ConditionBaseSnapshotReady)
	if acc.Status != metav1.ConditionTrue || acc.ObservedGeneration != 2 {
		t.Errorf("Accepted = %+v", acc)
	}
	if base.Status != "" {
		t.Errorf("BaseSnapshotReady = %+v; validation alone must not claim a base snapshot", base)
	}
	tpl.Spec.Image = "python::3"
	if acc := condition(templateStatus(tpl).Conditions, sandlotv1.ConditionAccepted); acc.Status != metav1.ConditionFalse ||
		acc.Reason != sandlotv1.ReasonInvalidImage {
		t.Errorf("Accepted for a bad image = %+v", acc)
	}
}

func condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}
