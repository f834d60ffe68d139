package e2b

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Template tags. sandlot keeps one build per template (its base snapshots,
// one per node), so a tag names the build the template had when the tag
// was assigned and keeps that build's ID; "default" always names the
// current build. After a rebuild an older tag is still listed with its
// build ID, and a create from it is refused saying the build is gone
// (409): never served by another build. Tags are the template's
// annotation AnnotationTags.

// AnnotationTags holds a Template's tags (JSON: tag → templateTag).
const AnnotationTags = "sandlot.dev/tags"

// defaultTag names a template's current build.
const defaultTag = "default"

const maxTags = 64

var tagRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,128}$`)

// templateTag is E2B's TemplateTag.
type templateTag struct {
	Tag       string `json:"tag"`
	BuildID   string `json:"buildID"`
	CreatedAt string `json:"createdAt"`
}

// tagsOf are tpl's assigned tags ("default" not among them).
func tagsOf(tpl *sandlotv1.Template) map[string]templateTag {
	out := map[string]templateTag{}
	if raw := tpl.Annotations[AnnotationTags]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &out) // a hand-broken annotation is no tags
	}
	return out
}

// templateSubroute serves GET /templates/{id}/{sub}: one pattern for the
// aliases route (/templates/aliases/{alias}) and the tags route
// (/templates/{id}/tags), which as two patterns would both match
// /templates/aliases/tags (net/http refuses such a pair).
func (s *Server) templateSubroute(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	id, sub := r.PathValue("id"), r.PathValue("sub")
	switch {
	case id == "aliases":
		return s.aliasExists(w, r, sub)
	case sub == "tags":
		return s.listTags(r, id)
	}
	return 0, nil, errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
}

func (s *Server) listTags(r *http.Request, id string) (int, any, *apiError) {
	tpl, aerr := s.findTemplate(r, id)
	if aerr != nil {
		return 0, nil, aerr
	}
	out := []templateTag{{Tag: defaultTag, BuildID: buildUUID(tpl.Status.BaseRevision), CreatedAt: tpl.CreationTimestamp.UTC().Format(time.RFC3339)}}
	tags := tagsOf(tpl)
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, tags[k])
	}
	return http.StatusOK, out, nil
}

// assignTags answers POST /templates/tags: {target: "name[:tag]", tags}.
// The target's build must be the template's current one (the only build
// kept).
func (s *Server) assignTags(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if aerr := decodeBody(r, &body); aerr != nil {
		return 0, nil, aerr
	}
	if aerr := checkTags(body.Tags); aerr != nil {
		return 0, nil, aerr
	}
	name, tag, _ := strings.Cut(body.Target, ":")
	var build string
	aerr := s.editTags(r.Context(), name, func(tpl *sandlotv1.Template, tags map[string]templateTag) *apiError {
		var aerr *apiError
		if build, aerr = currentBuildOf(tpl, tags, tag); aerr != nil {
			return aerr
		}
		now := s.now().UTC().Format(time.RFC3339)
		for _, t := range body.Tags {
			tags[t] = templateTag{Tag: t, BuildID: build, CreatedAt: now}
		}
		if len(tags) > maxTags {
			return errorf(http.StatusBadRequest, "template %s would have %d tags, at most %d", name, len(tags), maxTags)
		}
		return nil
	})
	if aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusCreated, map[string]any{"tags": body.Tags, "buildID": build}, nil
}

// deleteTags answers DELETE /templates/tags: {name, tags}.
func (s *Server) deleteTags(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if aerr := decodeBody(r, &body); aerr != nil {
		return 0, nil, aerr
	}
	if aerr := checkTags(body.Tags); aerr != nil {
		return 0, nil, aerr
	}
	name, _, _ := strings.Cut(body.Name, ":")
	aerr := s.editTags(r.Context(), name, func(_ *sandlotv1.Template, tags map[string]templateTag) *apiError {
		for _, t := range body.Tags {
			if _, ok := tags[t]; !ok {
				return errorf(http.StatusNotFound, "template %s has no tag %q", name, t)
			}
			delete(tags, t)
		}
		return nil
	})
	if aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusNoContent, nil, nil
}

// checkTags refuses an empty list, a malformed tag and "default" (which
// always names the current build).
func checkTags(tags []string) *apiError {
	if len(tags) == 0 {
		return errorf(http.StatusBadRequest, "field \"tags\": name at least one tag")
	}
	for _, t := range tags {
		switch {
		case !tagRE.MatchString(t):
			return errorf(http.StatusBadRequest, "field \"tags\": %q is not 1 to 128 of [a-zA-Z0-9._-]", t)
		case t == defaultTag:
			return errorf(http.StatusBadRequest, "field \"tags\": %q always names the template's latest build", t)
		}
	}
	return nil
}

// currentBuildOf is the build tag names on tpl, which must be its
// current one ("" and "default" name it).
func currentBuildOf(tpl *sandlotv1.Template, tags map[string]templateTag, tag string) (string, *apiError) {
	cur := buildUUID(tpl.Status.BaseRevision)
	if cur == "" {
		return "", errorf(http.StatusConflict, "template %s has no build yet", tpl.Name)
	}
	if tag == "" || tag == defaultTag {
		return cur, nil
	}
	t, ok := tags[tag]
	switch {
	case !ok:
		return "", errorf(http.StatusNotFound, "template %s has no tag %q", tpl.Name, tag)
	case t.BuildID != cur:
		return "", errorf(http.StatusConflict, "tag %q of template %s names build %s, which sandlot no longer keeps "+
			"(a template keeps only its latest build, %s)", tag, tpl.Name, t.BuildID, cur)
	}
	return cur, nil
}

// editTags changes the tags of the team's own template name (a public
// one's tags are its team's), retrying on conflicts.
func (s *Server) editTags(ctx context.Context, name string, edit func(*sandlotv1.Template, map[string]templateTag) *apiError) *apiError {
	var aerr *apiError
	tpl := &sandlotv1.Template{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		aerr = nil
		if err := s.kube.Get(ctx, client.ObjectKey{Namespace: teamOf(ctx), Name: name}, tpl); err != nil {
			aerr = errorf(http.StatusNotFound, "template %q not found", name)
			return nil
		}
		tags := tagsOf(tpl)
		if aerr = edit(tpl, tags); aerr != nil {
			return nil
		}
		if tpl.Annotations == nil {
			tpl.Annotations = map[string]string{}
		}
		tpl.Annotations[AnnotationTags] = string(mustJSON(tags))
		return s.kube.Update(ctx, tpl)
	})
	if err != nil {
		return kubeError("update the tags of template "+name, err)
	}
	if aerr != nil {
		return aerr
	}
	// Answered once this API's cache holds the tags: the caller's next
	// request reads them.
	return s.kube.waitSeen(ctx, tpl)
}

// resolveTag checks a create's "name:tag" against the team's template:
// the tag must name its current build.
func (s *Server) resolveTag(ctx context.Context, name, tag string) *apiError {
	if tag == defaultTag {
		return nil // the current build, whichever template name resolves to
	}
	tpl := &sandlotv1.Template{}
	if err := s.kube.Get(ctx, client.ObjectKey{Namespace: teamOf(ctx), Name: name}, tpl); err != nil {
		return errorf(http.StatusNotFound, "template %q not found in namespace %s (tags are a team's own templates')", name, teamOf(ctx))
	}
	_, aerr := currentBuildOf(tpl, tagsOf(tpl), tag)
	return aerr
}

// buildUUID is the E2B build ID of a base revision (a digest): E2B's
// OpenAPI document says a build ID is a UUID, and the Python SDK parses
// it as one. Derived, so a template's build keeps its ID (name-based, as
// a version 8 UUID: the digest's first 16 bytes).
func buildUUID(rev string) string {
	if rev == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(rev))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
