package chart

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestAPITeams: each of api.teams gets the API's ClusterRole bound in its
// namespace, and the API serves them (--teams); without teams, neither.
func TestAPITeams(t *testing.T) {
	objs := render(t, map[string]any{"api": map[string]any{"teams": []any{"team-a", "team-b"}}})
	for _, ns := range []string{"team-a", "team-b"} {
		var rb rbacv1.RoleBinding
		objs.into(t, "RoleBinding", "sandlot-api@"+ns, &rb)
		if rb.Namespace != ns || rb.RoleRef.Name != "sandlot-api" || rb.RoleRef.Kind != "ClusterRole" ||
			len(rb.Subjects) != 1 || rb.Subjects[0].Name != "sandlot-api" {
			t.Errorf("team %s binding = %+v", ns, rb)
		}
	}
	var d appsv1.Deployment
	objs.into(t, "Deployment", "sandlot-api", &d)
	hasArg(t, d.Spec.Template.Spec.Containers[0].Args, "--teams=team-a,team-b")
	plain := render(t, nil)
	plain.into(t, "Deployment", "sandlot-api", &d)
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--teams") {
			t.Errorf("teams argument %q without api.teams", a)
		}
	}
	if _, _, err := release(map[string]any{"api": map[string]any{"teams": []any{"Not_A_Namespace"}}}); err == nil {
		t.Error("a team that is not a namespace name rendered")
	}
}
