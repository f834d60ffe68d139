package e2b

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Public templates. A team publishes one of its Templates with the label
// sandlot.dev/public=true (E2B's PATCH /templates/{id} {"public": true},
// or kubectl label). Every served team then sees it in GET /templates and
// creates sandboxes from it by name, or by <namespace>/<name> when the
// name is ambiguous. A team's sandboxes never restore another namespace's
// data: a team's first create copies the template (its image, size and
// build steps, a COPY step's files included) into the team's namespace,
// where the controller builds that copy's base like any template's. The
// copy (a mirror) follows its source's spec at each create; once the
// source is no longer public the API refuses creates from it (404), and
// the copy is the team's to delete.

const (
	// AnnotationPublicSource marks a mirror with its source template,
	// "<namespace>/<name>/<uid>".
	AnnotationPublicSource = "e2b.sandlot.dev/public-source"
	// AnnotationPublicSpec is the hash of the source spec a mirror copies.
	AnnotationPublicSpec = "e2b.sandlot.dev/public-spec"
)

func isPublic(tpl *sandlotv1.Template) bool {
	return tpl.Labels[sandlotv1.LabelPublic] == "true" && tpl.DeletionTimestamp == nil
}

// publicTemplate is the public template id names for the request's team,
// nil when there is none. Only "namespace/name" names one: a bare name is
// only ever the team's own, since another team may use any name and
// publishing it must not answer this team's creates (a team publishing
// "base" or "my-agent" would otherwise run its image with the victim's
// env and code).
func (s *Server) publicTemplate(ctx context.Context, id string) (*sandlotv1.Template, *apiError) {
	ns, name, ok := strings.Cut(id, "/")
	if !ok || ns == teamOf(ctx) || !slices.Contains(s.cfg.Namespaces(), ns) || !templateName.MatchString(name) {
		return nil, nil
	}
	tpl := &sandlotv1.Template{}
	err := s.kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tpl)
	switch {
	case err == nil && isPublic(tpl):
		return tpl, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, kubeError("look up template "+id, err)
	}
	return nil, nil
}

// reservedName says why team may not publish a template named name: the
// SDKs' default IDs and the default template are the operator's (the API's
// own namespace publishes them); "" when it may.
func (s *Server) reservedName(team, name string) string {
	if team == s.cfg.Namespace || (!defaultTemplateIDs[name] && name != s.cfg.DefaultTemplate) {
		return ""
	}
	return fmt.Sprintf("template name %q is reserved by the operator (the SDKs' default template IDs and the platform's "+
		"default template %q): publish the template under another name", name, s.cfg.DefaultTemplate)
}

// sourceOf is the public template own copies (nil for the team's own
// template); a copy whose source is no longer public (unpublished,
// deleted, replaced, or never: an annotation the team wrote) is 404.
func (s *Server) sourceOf(ctx context.Context, own *sandlotv1.Template) (*sandlotv1.Template, *apiError) {
	ref, ok := own.Annotations[AnnotationPublicSource]
	if !ok {
		return nil, nil
	}
	gone := errorf(http.StatusNotFound, "template %q was copied from a public template that is no longer public (%s)", own.Name, ref)
	parts := strings.Split(ref, "/")
	if len(parts) != 3 {
		return nil, gone
	}
	src, aerr := s.publicTemplate(ctx, parts[0]+"/"+parts[1])
	switch {
	case aerr != nil:
		return nil, aerr
	case src == nil || string(src.UID) != parts[2]:
		return nil, gone
	}
	return src, nil
}

// mirrorSpec is the spec a mirror of src has (its warm pool is the
// team's: a copy keeps its own) and that spec's hash.
func mirrorSpec(src *sandlotv1.Template, pool int32) (sandlotv1.TemplateSpec, string) {
	spec := *src.Spec.DeepCopy()
	spec.WarmPool = 0
	raw, _ := json.Marshal(spec) // a spec always marshals
	sum := sha256.Sum256(raw)
	spec.WarmPool = pool
	return spec, hex.EncodeToString(sum[:16])
}

// mirror makes (or brings up to date) the request team's copy of the
// public template src, and returns its name.
func (s *Server) mirror(ctx context.Context, src *sandlotv1.Template) (string, *apiError) {
	team := teamOf(ctx)
	cur := &sandlotv1.Template{}
	err := s.kube.direct.Get(ctx, client.ObjectKey{Namespace: team, Name: src.Name}, cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", kubeError("get template "+src.Name, err)
	}
	exists := err == nil
	if exists && cur.Annotations[AnnotationPublicSource] == "" {
		return "", errorf(http.StatusConflict, "your team has a template %q of its own: a public template of that name "+
			"cannot be copied beside it", src.Name)
	}
	spec, sum := mirrorSpec(src, cur.Spec.WarmPool)
	ref := src.Namespace + "/" + src.Name + "/" + string(src.UID)
	if exists && cur.Annotations[AnnotationPublicSource] == ref && cur.Annotations[AnnotationPublicSpec] == sum {
		return cur.Name, nil
	}
	if aerr := s.copyBuildFiles(ctx, src, team); aerr != nil {
		return "", aerr
	}
	if !exists {
		cur = &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: src.Name, Namespace: team}}
	}
	cur.Spec = spec
	metav1.SetMetaDataAnnotation(&cur.ObjectMeta, AnnotationPublicSource, ref)
	metav1.SetMetaDataAnnotation(&cur.ObjectMeta, AnnotationPublicSpec, sum)
	if !exists {
		err = s.kube.Create(ctx, cur)
	} else {
		err = s.kube.Update(ctx, cur)
	}
	if err != nil {
		return "", kubeError("copy public template "+src.Namespace+"/"+src.Name, err)
	}
	s.adoptBuildFiles(ctx, cur) // the copied files go with the copy
	return cur.Name, nil
}

// copyBuildFiles copies the files src's COPY steps name into namespace
// ns (a file set already there is the same: its name is its hash).
func (s *Server) copyBuildFiles(ctx context.Context, src *sandlotv1.Template, ns string) *apiError {
	if src.Spec.Build == nil || src.Namespace == ns {
		return nil
	}
	for _, step := range src.Spec.Build.Steps {
		if step.FilesHash == "" {
			continue
		}
		name := sandlotv1.BuildFilesName(step.FilesHash)
		cm := &corev1.ConfigMap{}
		if err := s.kube.Get(ctx, client.ObjectKey{Namespace: src.Namespace, Name: name}, cm); err != nil {
			return kubeError(fmt.Sprintf("read the files of public template %s/%s", src.Namespace, src.Name), err)
		}
		cp := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: maps.Clone(cm.Labels),
			Annotations: maps.Clone(cm.Annotations)}, BinaryData: cm.BinaryData, Data: cm.Data}
		if err := s.storeCopiedFiles(ctx, cp, src.Name, step.FilesHash); err != nil {
			return kubeError("copy the files of public template "+src.Name, err)
		}
	}
	return nil
}

// ownTemplate resolves a templateID onto the team's own template, or its
// mirror of a public template while that is public (brought up to date).
// ok is false when the team has no template of that name.
func (s *Server) ownTemplate(ctx context.Context, id string) (name string, ok bool, aerr *apiError) {
	id = strings.TrimPrefix(id, teamOf(ctx)+"/")
	own := &sandlotv1.Template{}
	if strings.Contains(id, "/") || s.kube.Get(ctx, client.ObjectKey{Namespace: teamOf(ctx), Name: id}, own) != nil {
		return "", false, nil
	}
	src, aerr := s.sourceOf(ctx, own)
	switch {
	case aerr != nil:
		return "", false, aerr
	case src == nil:
		return id, true, nil
	}
	name, aerr = s.mirror(ctx, src)
	return name, aerr == nil, aerr
}

// publicCopy resolves a templateID onto the team's copy of a public
// template of another team, made now if need be.
func (s *Server) publicCopy(ctx context.Context, id string) (name string, ok bool, aerr *apiError) {
	src, aerr := s.publicTemplate(ctx, id)
	if aerr != nil || src == nil {
		return "", false, aerr
	}
	name, aerr = s.mirror(ctx, src)
	return name, aerr == nil, aerr
}

// updateTemplate answers PATCH /templates/{id} and /v2/templates/{id}:
// {"public": bool} publishes the team's template or takes it back.
func (s *Server) updateTemplate(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var req struct {
		Public *bool `json:"public"`
	}
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	if req.Public == nil {
		return 0, nil, errorf(http.StatusBadRequest, "nothing to update: the body's only field is public")
	}
	tpl := &sandlotv1.Template{}
	key := client.ObjectKey{Namespace: teamOf(r.Context()), Name: r.PathValue("id")}
	if err := s.kube.direct.Get(r.Context(), key, tpl); err != nil {
		return 0, nil, errorf(http.StatusNotFound, "template %q not found", key.Name)
	}
	if src := tpl.Annotations[AnnotationPublicSource]; src != "" {
		return 0, nil, errorf(http.StatusBadRequest, "template %q is this team's copy of public template %s: "+
			"its owner publishes it", key.Name, src)
	}
	if *req.Public == isPublic(tpl) {
		return http.StatusOK, map[string]any{"names": []string{tpl.Name}}, nil
	}
	if why := s.reservedName(key.Namespace, key.Name); *req.Public && why != "" {
		return 0, nil, errorf(http.StatusBadRequest, "%s", why)
	}
	// A merge patch of the label alone: an update would be refused (409)
	// whenever the controller wrote the template's status in between, as
	// it does just after a build.
	orig := tpl.DeepCopy()
	if *req.Public {
		metav1.SetMetaDataLabel(&tpl.ObjectMeta, sandlotv1.LabelPublic, "true")
	} else {
		delete(tpl.Labels, sandlotv1.LabelPublic)
	}
	if err := s.kube.Patch(r.Context(), tpl, client.MergeFrom(orig)); err != nil {
		return 0, nil, kubeError("update template "+key.Name, err)
	}
	// Every read of templates goes through the cache: the answer waits
	// until it holds this change, so the next request (any team's) sees it.
	if aerr := s.kube.waitSeen(r.Context(), tpl); aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusOK, map[string]any{"names": []string{tpl.Name}}, nil
}
