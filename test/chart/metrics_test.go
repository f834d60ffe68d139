package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestMetricsServing: every component serves its metrics on
// --metrics-bind-address (the API's old --metrics-listen is gone from
// the chart), securely unless metrics.secure is false.
func TestMetricsServing(t *testing.T) {
	for _, secure := range []bool{true, false} {
		objs := render(t, map[string]any{"metrics": map[string]any{"secure": secure}})
		var ctl, api appsv1.Deployment
		var agent appsv1.DaemonSet
		objs.into(t, "Deployment", "sandlot-controller", &ctl)
		objs.into(t, "Deployment", "sandlot-api", &api)
		objs.into(t, "DaemonSet", "sandlot-agent", &agent)
		want := "--metrics-secure=true"
		if !secure {
			want = "--metrics-secure=false"
		}
		for name, args := range map[string][]string{"controller": ctl.Spec.Template.Spec.Containers[0].Args,
			"api": api.Spec.Template.Spec.Containers[0].Args, "agent": agent.Spec.Template.Spec.Containers[0].Args} {
			hasArg(t, args, want)
			if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--metrics-bind-address=") }) {
				t.Errorf("%s: no --metrics-bind-address in %v", name, args)
			}
			if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--metrics-listen") }) {
				t.Errorf("%s: the deprecated --metrics-listen in %v", name, args)
			}
		}
		_, reader := objs[key("ClusterRole", "sandlot-metrics-reader")]
		_, apiAuth := objs[key("ClusterRoleBinding", "sandlot-api-metrics-auth")]
		if reader != secure || apiAuth != secure {
			t.Errorf("secure %t: ClusterRole sandlot-metrics-reader %t, the API's review rights %t", secure, reader, apiAuth)
		}
		sm := render(t, map[string]any{"metrics": map[string]any{"secure": secure, "serviceMonitor": map[string]any{"enabled": true}}}).
			get(t, "ServiceMonitor", "sandlot")
		checkScrape(t, sm, map[bool]string{true: "https", false: "http"}[secure])
	}
}

// checkScrape: the ServiceMonitor scrapes /metrics with scheme, and over
// https with the Prometheus pod's token, skipping the self-signed
// certificates' verification.
func checkScrape(t *testing.T, sm *unstructured.Unstructured, scheme string) {
	t.Helper()
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v, want one", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["scheme"] != scheme || ep["path"] != "/metrics" || ep["port"] != "metrics" {
		t.Errorf("ServiceMonitor endpoint %v, want %s on port metrics, path /metrics", ep, scheme)
	}
	if scheme != "https" {
		return
	}
	skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify")
	if ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || !skip {
		t.Errorf("ServiceMonitor endpoint %v, want the pod's token and insecureSkipVerify", ep)
	}
}

// TestMetricsRBAC: the reader role grants get of /metrics and nothing
// else, metrics.readers are bound to it, and the three components may
// ask the API server to review a scrape's token and right.
func TestMetricsRBAC(t *testing.T) {
	objs := render(t, map[string]any{"metrics": map[string]any{"readers": []any{
		map[string]any{"name": "prometheus-k8s", "namespace": "monitoring"}}}})
	var reader rbacv1.ClusterRole
	objs.into(t, "ClusterRole", "sandlot-metrics-reader", &reader)
	if len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].NonResourceURLs, []string{"/metrics"}) ||
		!slices.Equal(reader.Rules[0].Verbs, []string{"get"}) || len(reader.Rules[0].Resources) != 0 {
		t.Errorf("sandlot-metrics-reader rules %+v, want get /metrics only", reader.Rules)
	}
	var crb rbacv1.ClusterRoleBinding
	objs.into(t, "ClusterRoleBinding", "sandlot-metrics-reader", &crb)
	if crb.RoleRef.Name != "sandlot-metrics-reader" || len(crb.Subjects) != 1 ||
		crb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}) {
		t.Errorf("sandlot-metrics-reader binding %+v", crb)
	}
	if _, ok := render(t, nil)[key("ClusterRoleBinding", "sandlot-metrics-reader")]; ok {
		t.Error("sandlot-metrics-reader bound with no readers")
	}
	var apiAuth rbacv1.ClusterRoleBinding
	objs.into(t, "ClusterRoleBinding", "sandlot-api-metrics-auth", &apiAuth)
	if apiAuth.Subjects[0].Name != "sandlot-api" || apiAuth.Subjects[0].Namespace != namespace {
		t.Errorf("sandlot-api-metrics-auth binds %+v, want the API's service account", apiAuth.Subjects)
	}
	for _, role := range []string{"sandlot-controller", "sandlot-agent", "sandlot-api-metrics-auth"} {
		var cr rbacv1.ClusterRole
		objs.into(t, "ClusterRole", role, &cr)
		for _, want := range [][2]string{{"authentication.k8s.io", "tokenreviews"}, {"authorization.k8s.io", "subjectaccessreviews"}} {
			if !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.APIGroups, want[0]) && slices.Contains(r.Resources, want[1]) && slices.Contains(r.Verbs, "create")
			}) {
				t.Errorf("ClusterRole %s may not create %s", role, want[1])
			}
		}
	}
}
