package e2b

import (
	"context"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Requested builds. The SDK asks for its COPY steps' upload links after
// POST /v3/templates and before it starts the build, when a first
// build's Template does not exist yet. So POST /v3/templates records the
// build it names: a small ConfigMap per template name (labelled
// LabelBuildRequest), dropped when the build starts or swept once
// buildRequestTTL has passed (buildsweep.go). Files are uploaded only for
// a build so recorded, or for a template's build while it runs: never
// for a template that does not exist, nor for another team's.

const (
	// LabelBuildRequest marks a requested build's ConfigMap with its
	// template's name.
	LabelBuildRequest = "e2b.sandlot.dev/build-request"
	// AnnotationBuildID is, on a requested build, its build ID; on build
	// files, the build they were uploaded (or last asked) for.
	AnnotationBuildID = "e2b.sandlot.dev/build-id"
	// AnnotationExpires is, on either, when it lapses (RFC 3339): a
	// request no longer awaits files, files no build copies are swept.
	AnnotationExpires = "e2b.sandlot.dev/expires"
)

// buildRequestTTL is how long a requested build awaits its files: an
// upload link's life (the SDK asks for the links right after the request).
const buildRequestTTL = uploadLinkTTL

func buildRequestName(tpl string) string { return "sandlot-build-request-" + tpl }

func expiryStamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// expired is whether annotations say their object lapsed by now; one
// without a readable expiry (written before there were expiries) has.
func expired(annotations map[string]string, now time.Time) bool {
	at, err := time.Parse(time.RFC3339, annotations[AnnotationExpires])
	return err != nil || !now.Before(at)
}

// checkPendingBuilds refuses a request of template tpl's build when the
// team has limit requested (items) already; a template's own request is
// replaced by its next, so does not count against it.
func checkPendingBuilds(items []metav1.PartialObjectMetadata, tpl string, limit int) *apiError {
	n := 0
	for i := range items {
		if items[i].Name != buildRequestName(tpl) {
			n++
		}
	}
	if n >= limit {
		return errorf(http.StatusTooManyRequests, "builds: this team has %d builds requested (POST /v3/templates) and not started, "+
			"the limit (sandlot-api --max-pending-builds) is %d; a request lapses %v after it", n, limit, buildRequestTTL)
	}
	return nil
}

// recordBuildRequest records that team requested build buildID of tpl
// (replacing an earlier request of tpl), within the team's bound.
func (s *Server) recordBuildRequest(ctx context.Context, team, tpl, buildID string) *apiError {
	mu := s.locks.of(team)
	mu.Lock()
	defer mu.Unlock()
	items, err := s.kube.configMapsMeta(ctx, team, LabelBuildRequest)
	if err != nil {
		return kubeError("count the team's requested builds", err)
	}
	if aerr := checkPendingBuilds(items, tpl, s.cfg.MaxPendingBuilds); aerr != nil {
		return aerr
	}
	ann := map[string]string{AnnotationBuildID: buildID, AnnotationExpires: expiryStamp(s.now().Add(buildRequestTTL))}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: buildRequestName(tpl), Namespace: team,
		Labels: map[string]string{LabelBuildRequest: tpl}, Annotations: ann}}
	err = s.kube.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		_, err = s.kube.patchConfigMapMeta(ctx, team, cm.Name, func(m *metav1.PartialObjectMetadata) bool {
			metav1.SetMetaDataLabel(&m.ObjectMeta, LabelBuildRequest, tpl)
			for k, v := range ann {
				metav1.SetMetaDataAnnotation(&m.ObjectMeta, k, v)
			}
			return true
		})
	}
	if err != nil {
		return kubeError("record the build requested of "+tpl, err)
	}
	return nil
}

// awaitedBuild is the build of team's template tpl that files are
// uploaded for now: the one requested and not started, or the template's
// build while it runs. There is none (404) for a template that does not
// exist, another team's (it is not in this namespace) or one whose build
// ended.
func (s *Server) awaitedBuild(ctx context.Context, team, tpl string) (string, *apiError) {
	req := &corev1.ConfigMap{}
	err := s.kube.Get(ctx, client.ObjectKey{Namespace: team, Name: buildRequestName(tpl)}, req)
	switch {
	case err == nil && req.Labels[LabelBuildRequest] == tpl && !expired(req.Annotations, s.now()):
		return req.Annotations[AnnotationBuildID], nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", kubeError("look up the build requested of "+tpl, err)
	}
	t := &sandlotv1.Template{}
	// Past the cache: a build started a moment ago must be seen running.
	err = s.kube.direct.Get(ctx, client.ObjectKey{Namespace: team, Name: tpl}, t)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", kubeError("look up template "+tpl, err)
	}
	if err == nil && t.DeletionTimestamp == nil && t.Spec.Build != nil {
		if state, _ := buildState(t); state == "building" {
			return t.Spec.Build.ID, nil
		}
	}
	return "", errorf(http.StatusNotFound, "template %q has no build awaiting files: upload links are for a build "+
		"requested (POST /v3/templates) in the last %v and not started, or one running", tpl, buildRequestTTL)
}

// consumeBuildRequest drops the request of tpl's build buildID once it
// started: the Template carries the build now. A later request of the
// template awaits its own build and stays. Failing, the request lapses
// and is swept: the build has started either way.
func (s *Server) consumeBuildRequest(ctx context.Context, team, tpl, buildID string) {
	req := &corev1.ConfigMap{}
	if err := s.kube.Get(ctx, client.ObjectKey{Namespace: team, Name: buildRequestName(tpl)}, req); err != nil {
		return
	}
	if req.Annotations[AnnotationBuildID] != buildID {
		return
	}
	err := s.kube.Delete(ctx, req, client.Preconditions{UID: &req.UID, ResourceVersion: &req.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		s.cfg.Log.Warn("drop a started build's request (it lapses instead)", "namespace", team, "template", tpl, "error", err)
	}
}
