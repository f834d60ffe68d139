package template

import (
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// BuilderProbe is the template's readiness probe, or envd's /health: a
// base snapshot is never taken of a guest still booting.
func BuilderProbe(tpl *sandlotv1.Template) *sandlotv1.ReadinessProbe {
	if tpl.Spec.ReadinessProbe != nil {
		return tpl.Spec.ReadinessProbe
	}
	return &sandlotv1.ReadinessProbe{HTTPGet: &sandlotv1.HTTPGetProbe{Port: sandlotv1.EnvdPort, Path: "/health"}}
}
