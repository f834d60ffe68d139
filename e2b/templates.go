package e2b

import (
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func (s *Server) listTemplates(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	list := &sandlotv1.TemplateList{}
	if err := s.kube.List(r.Context(), list, client.InNamespace(teamOf(r.Context()))); err != nil {
		return 0, nil, kubeError("list templates", err)
	}
	out := make([]*templateJSON, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, s.templateJSON(&list.Items[i]))
		}
	}
	return http.StatusOK, out, nil
}

func (s *Server) getTemplate(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	tpl := &sandlotv1.Template{}
	if err := s.kube.Get(r.Context(), client.ObjectKey{Namespace: teamOf(r.Context()), Name: r.PathValue("id")}, tpl); err != nil {
		return 0, nil, errorf(http.StatusNotFound, "template %q not found", r.PathValue("id"))
	}
	return http.StatusOK, struct {
		*templateJSON
		Builds []any `json:"builds"`
	}{s.templateJSON(tpl), []any{}}, nil
}

func (s *Server) templateJSON(tpl *sandlotv1.Template) *templateJSON {
	t := &templateJSON{TemplateID: tpl.Name, BuildID: tpl.Status.BaseRevision, CPUCount: tpl.Spec.Resources.VCPU,
		MemoryMB: tpl.Spec.Resources.MemoryMiB, DiskSizeMB: tpl.Spec.WritableLayerMiB, Aliases: []string{}, Names: []string{tpl.Name},
		CreatedAt: tpl.CreationTimestamp.UTC().Format(time.RFC3339), UpdatedAt: tpl.CreationTimestamp.UTC().Format(time.RFC3339),
		BuildCount: int32(len(tpl.Status.BaseSnapshots)), EnvdVersion: s.cfg.EnvdVersion, BuildStatus: "building"}
	if c := meta.FindStatusCondition(tpl.Status.Conditions, sandlotv1.ConditionBaseSnapshotReady); c != nil {
		switch {
		case c.Status == metav1.ConditionTrue:
			t.BuildStatus = "ready"
		case c.Reason != sandlotv1.ReasonBuilding:
			t.BuildStatus = "error"
		}
	}
	return t
}

// deleteTemplate deletes a Template or a Snapshot (the SDK deletes
// snapshots through this route).
func (s *Server) deleteTemplate(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	key := client.ObjectKey{Namespace: teamOf(r.Context()), Name: r.PathValue("id")}
	for _, o := range []client.Object{&sandlotv1.Snapshot{}, &sandlotv1.Template{}} {
		if err := s.kube.Get(r.Context(), key, o); err != nil || o.GetDeletionTimestamp() != nil || ownedByTemplate(o) {
			continue
		}
		if err := s.kube.Delete(r.Context(), o); err != nil && !apierrors.IsNotFound(err) {
			return 0, nil, kubeError("delete "+key.Name, err)
		}
		return http.StatusNoContent, nil, nil
	}
	return 0, nil, errorf(http.StatusNotFound, "template or snapshot %q not found", key.Name)
}
