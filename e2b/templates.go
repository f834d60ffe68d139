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

// listTemplates answers GET /templates: the team's own templates (its
// copies of public ones are shown as their sources) and the public
// templates of the other teams served.
func (s *Server) listTemplates(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	tpls, aerr := s.visibleTemplates(r)
	if aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusOK, s.templatesJSON(r, tpls), nil
}

// listTemplatesV2 is GET /v2/templates: the same templates, paged by
// limit and nextToken (X-Next-Token), oldest first.
func (s *Server) listTemplatesV2(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	limit, aerr := pageLimit(r.URL.Query().Get("limit"))
	if aerr != nil {
		return 0, nil, aerr
	}
	tpls, aerr := s.visibleTemplates(r)
	if aerr != nil {
		return 0, nil, aerr
	}
	page, next, aerr := paginate(tpls, r.URL.Query().Get("nextToken"), limit, func(t **sandlotv1.Template) pageKey {
		return pageKey{(*t).CreationTimestamp.Time, (*t).Namespace + "/" + (*t).Name}
	})
	if aerr != nil {
		return 0, nil, aerr
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	return http.StatusOK, s.templatesJSON(r, page), nil
}

// visibleTemplates are the team's templates and the public ones of other
// teams. A teamID query naming another team is refused: a key speaks
// for its own team only.
func (s *Server) visibleTemplates(r *http.Request) ([]*sandlotv1.Template, *apiError) {
	team := teamOf(r.Context())
	if id := r.URL.Query().Get("teamID"); id != "" && id != team {
		return nil, errorf(http.StatusForbidden, "query \"teamID\": %q is not the team of this API key", id)
	}
	var out []*sandlotv1.Template
	for _, ns := range s.cfg.Namespaces() {
		list := &sandlotv1.TemplateList{}
		if err := s.kube.List(r.Context(), list, client.InNamespace(ns)); err != nil {
			return nil, kubeError("list templates", err)
		}
		for i := range list.Items {
			tpl := &list.Items[i]
			if tpl.DeletionTimestamp == nil && ((ns == team && tpl.Annotations[AnnotationPublicSource] == "") || isPublic(tpl)) {
				out = append(out, tpl)
			}
		}
	}
	return out, nil
}

func (s *Server) templatesJSON(r *http.Request, tpls []*sandlotv1.Template) []*templateJSON {
	out := make([]*templateJSON, 0, len(tpls))
	for _, tpl := range tpls {
		out = append(out, s.templateJSON(tpl, teamOf(r.Context())))
	}
	return out
}

// findTemplate is the team's template id, or a public one of another team
// (the team's copy of one stands for its source while that is public).
func (s *Server) findTemplate(r *http.Request, id string) (*sandlotv1.Template, *apiError) {
	tpl := &sandlotv1.Template{}
	err := s.kube.Get(r.Context(), client.ObjectKey{Namespace: teamOf(r.Context()), Name: id}, tpl)
	if err == nil && tpl.DeletionTimestamp != nil {
		return nil, errorf(http.StatusNotFound, "template %q is being deleted", id)
	}
	if err == nil {
		if src, aerr := s.sourceOf(r.Context(), tpl); aerr != nil || src != nil {
			return src, aerr
		}
		return tpl, nil
	}
	tpl, aerr := s.publicTemplate(r.Context(), id)
	if aerr == nil && tpl == nil {
		aerr = errorf(http.StatusNotFound, "template %q not found", id)
	}
	return tpl, aerr
}

func (s *Server) getTemplate(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	tpl, aerr := s.findTemplate(r, r.PathValue("id"))
	if aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusOK, struct {
		*templateJSON
		Builds []any `json:"builds"`
	}{s.templateJSON(tpl, teamOf(r.Context())), []any{}}, nil
}

// templateJSON is tpl as team sees it: another team's (public) template
// is also named <namespace>/<name>.
func (s *Server) templateJSON(tpl *sandlotv1.Template, team string) *templateJSON {
	names := []string{tpl.Name}
	if tpl.Namespace != team {
		names = append(names, tpl.Namespace+"/"+tpl.Name)
	}
	t := &templateJSON{TemplateID: tpl.Name, BuildID: buildUUID(tpl.Status.BaseRevision), CPUCount: tpl.Spec.Resources.VCPU,
		MemoryMB: tpl.Spec.Resources.MemoryMiB, DiskSizeMB: tpl.Spec.WritableLayerMiB, Aliases: []string{}, Names: names,
		Public:    isPublic(tpl),
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
		// The next request (Template.exists, a create) must not find it.
		_ = s.kube.waitGoing(r.Context(), o)
		return http.StatusNoContent, nil, nil
	}
	return 0, nil, errorf(http.StatusNotFound, "template or snapshot %q not found", key.Name)
}
