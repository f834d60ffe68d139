package chart

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
)

// TestAdmissionPolicy: the chart reserves pods' sandlot.dev/ keys to its
// own controller (and the agent's claim record) in every namespace, with
// the release namespace's service account names, refusing on error; the
// plain-RuntimeClass rule comes with admission.allowPlainRuntimeClassPods
// false only. What the CEL does is test/admission's (a real API server).
func TestAdmissionPolicy(t *testing.T) {
	for _, tc := range []struct {
		name        string
		vals        map[string]any
		validations int
	}{
		{"default", nil, 1},
		{"no plain pods", map[string]any{"admission": map[string]any{"allowPlainRuntimeClassPods": false}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.vals)
			var vap admissionv1.ValidatingAdmissionPolicy
			var bind admissionv1.ValidatingAdmissionPolicyBinding
			objs.into(t, "ValidatingAdmissionPolicy", "sandlot-pod-keys", &vap)
			objs.into(t, "ValidatingAdmissionPolicyBinding", "sandlot-pod-keys", &bind)
			checkPolicy(t, &vap, tc.validations)
			if bind.Spec.PolicyName != vap.Name || !slices.Equal(bind.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
				bind.Spec.MatchResources != nil || bind.Spec.ParamRef != nil {
				t.Errorf("binding %+v: want policy %s denying in every namespace", bind.Spec, vap.Name)
			}
		})
	}
}

func checkPolicy(t *testing.T, vap *admissionv1.ValidatingAdmissionPolicy, validations int) {
	t.Helper()
	s := vap.Spec
	if s.FailurePolicy == nil || *s.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", s.FailurePolicy)
	}
	rules := s.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"pods", "pods/*"}) ||
		!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("rules %+v: want pods and their subresources, CREATE and UPDATE", rules)
	}
	if len(s.Validations) != validations {
		t.Errorf("%d validations, want %d", len(s.Validations), validations)
	}
	vars := map[string]string{}
	for _, v := range s.Variables {
		vars[v.Name] = v.Expression
	}
	for name, user := range map[string]string{"controller": "sandlot-controller", "agent": "sandlot-agent"} {
		if want := "'system:serviceaccount:" + namespace + ":" + user + "'"; !strings.Contains(vars[name], want) {
			t.Errorf("variable %s %q: want the user %s", name, vars[name], want)
		}
	}
	for _, v := range s.Validations {
		if v.Reason == nil || *v.Reason != "Forbidden" || !strings.Contains(v.MessageExpression, "only sandlot\\'s controller") {
			t.Errorf("validation %+v: want Forbidden, a message naming the controller", v)
		}
	}
}
