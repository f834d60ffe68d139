package e2b

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Collection of build files. Each upload is a ConfigMap of the team's
// namespace, labelled sandlotv1.LabelBuildFiles with the template it was
// uploaded for and annotated with that build and an expiry. It goes:
//
//   - with the Templates whose builds copy it: each becomes an owner
//     (ownerReference) when its build starts, so Kubernetes' garbage
//     collector deletes the files with the last of them, whether this API
//     runs or not. The node agent reads them again whenever the base is
//     built on another node, so they stay as long as such a build copies
//     them, and a next build of the same files finds them ({"present":
//     true}, the SDK's cache hit);
//   - otherwise once the build it was uploaded for has ended, or its
//     expiry (buildFilesTTL) has passed. Only this API knows which build
//     that is, and an upload has no owner before its build starts (nor
//     ever, if the build does not copy it): the API's sweep deletes these,
//     and the requests that lapsed (buildrequest.go). It runs in the API,
//     not the controller, beside the only writer of both.

const (
	// builderTimeout is how long the controller lets a builder run its
	// steps (controllers/template/base.go's buildTimeout).
	builderTimeout = time.Hour
	// buildFilesTTL is how long files no build copies are kept after
	// their upload (or the last answer that they are present): the link's
	// life, then the build's.
	buildFilesTTL = uploadLinkTTL + builderTimeout
	// buildSweepEvery is how often the sweep runs.
	buildSweepEvery = time.Minute
)

// CollectBuildFiles sweeps each served namespace's build files and
// requested builds every buildSweepEvery until ctx ends. Replicas may each
// run it: a sweep deletes only what it saw, unchanged since.
func (s *Server) CollectBuildFiles(ctx context.Context) {
	tick := time.NewTicker(buildSweepEvery)
	defer tick.Stop()
	for {
		for _, ns := range s.cfg.Namespaces() {
			if err := s.sweepBuilds(ctx, ns, s.now()); err != nil && ctx.Err() == nil {
				s.cfg.Log.Warn("sweep build files", "namespace", ns, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sweepBuilds deletes ns's build files no build needs and its lapsed
// build requests.
func (s *Server) sweepBuilds(ctx context.Context, ns string, now time.Time) error {
	// In this order: a build that starts writes its Template before it
	// drops its request, so the files of a request gone by the second list
	// are in a build the third (past the cache) reads.
	files, err := s.kube.configMapsMeta(ctx, ns, sandlotv1.LabelBuildFiles)
	if err != nil {
		return err
	}
	reqs, err := s.kube.configMapsMeta(ctx, ns, LabelBuildRequest)
	if err != nil {
		return err
	}
	tpls := &sandlotv1.TemplateList{}
	if err := s.kube.direct.List(ctx, tpls, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list the templates of %s: %w", ns, err)
	}
	seen := seenBuilds(tpls.Items, reqs, now)
	var errs []error
	for i := range files {
		if seen.collectible(&files[i], now) {
			errs = append(errs, s.deleteUnchanged(ctx, &files[i]))
		}
	}
	for i := range reqs {
		if expired(reqs[i].Annotations, now) {
			errs = append(errs, s.deleteUnchanged(ctx, &reqs[i]))
		}
	}
	return errors.Join(errs...)
}

// buildsSeen is what a sweep read of a namespace's builds.
type buildsSeen struct {
	// copied are the files ConfigMaps a (live) Template's build copies.
	copied map[string]bool
	// awaiting are the builds, "<template>/<build ID>", that may still
	// copy files: requested and not lapsed, or running.
	awaiting map[string]bool
}

func seenBuilds(tpls []sandlotv1.Template, reqs []metav1.PartialObjectMetadata, now time.Time) buildsSeen {
	seen := buildsSeen{copied: map[string]bool{}, awaiting: map[string]bool{}}
	for i := range reqs {
		if !expired(reqs[i].Annotations, now) {
			seen.awaiting[reqs[i].Labels[LabelBuildRequest]+"/"+reqs[i].Annotations[AnnotationBuildID]] = true
		}
	}
	for i := range tpls {
		t := &tpls[i]
		if t.DeletionTimestamp != nil || t.Spec.Build == nil {
			continue
		}
		for _, st := range t.Spec.Build.Steps {
			if st.FilesHash != "" {
				seen.copied[sandlotv1.BuildFilesName(st.FilesHash)] = true
			}
		}
		if state, _ := buildState(t); state == "building" {
			seen.awaiting[t.Name+"/"+t.Spec.Build.ID] = true
		}
	}
	return seen
}

// collectible is whether the build files f may go: no build copies them,
// and the build they were uploaded for has ended or they have expired.
func (b buildsSeen) collectible(f *metav1.PartialObjectMetadata, now time.Time) bool {
	if b.copied[f.Name] {
		return false
	}
	return expired(f.Annotations, now) || !b.awaiting[f.Labels[sandlotv1.LabelBuildFiles]+"/"+f.Annotations[AnnotationBuildID]]
}

// deleteUnchanged deletes the ConfigMap m as the sweep saw it: one
// changed since (kept for a build a moment ago) is left to the next sweep.
func (s *Server) deleteUnchanged(ctx context.Context, m *metav1.PartialObjectMetadata) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace}}
	err := s.kube.Delete(ctx, cm, client.Preconditions{UID: &m.UID, ResourceVersion: &m.ResourceVersion})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("delete ConfigMap %s/%s: %w", m.Namespace, m.Name, err)
}

// managedFiles is whether this API wrote the files ConfigMap m (and so
// counts, keeps and collects it); one a user made with kubectl is theirs.
func managedFiles(m *metav1.PartialObjectMetadata) bool {
	_, ok := m.Labels[sandlotv1.LabelBuildFiles]
	return ok
}

// patchConfigMapMeta applies change to the metadata of ConfigMap ns/name
// (nothing when it reports no change), and returns that metadata: a
// metadata patch, so the files are neither read nor sent.
func (k *Kube) patchConfigMapMeta(ctx context.Context, ns, name string, change func(*metav1.PartialObjectMetadata) bool) (*metav1.PartialObjectMetadata, error) {
	var m *metav1.PartialObjectMetadata
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m = &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
			return err
		}
		orig := m.DeepCopy()
		if !change(m) {
			return nil
		}
		return k.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return nil, fmt.Errorf("update the metadata of ConfigMap %s/%s: %w", ns, name, err)
	}
	return m, nil
}

// keepFiles answers whether the files of hash are in ns and, when this
// API manages them, keeps them buildFilesTTL more, for tpl's build buildID
// when given: a build told they are present must find them.
func (s *Server) keepFiles(ctx context.Context, ns, hash, tpl, buildID string) (bool, error) {
	m, err := s.kube.patchConfigMapMeta(ctx, ns, sandlotv1.BuildFilesName(hash), func(m *metav1.PartialObjectMetadata) bool {
		if m.Annotations[sandlotv1.AnnotationFilesHash] != hash || !managedFiles(m) {
			return false
		}
		if tpl != "" {
			metav1.SetMetaDataLabel(&m.ObjectMeta, sandlotv1.LabelBuildFiles, tpl)
		}
		if buildID != "" {
			metav1.SetMetaDataAnnotation(&m.ObjectMeta, AnnotationBuildID, buildID)
		}
		metav1.SetMetaDataAnnotation(&m.ObjectMeta, AnnotationExpires, expiryStamp(s.now().Add(buildFilesTTL)))
		return true
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return m.Annotations[sandlotv1.AnnotationFilesHash] == hash, nil
}

// adoptBuildFiles makes tpl an owner of the files its build copies, so
// they go with it. Not an error to the build, which has started: the
// sweep keeps files a build copies and collects them once none does.
func (s *Server) adoptBuildFiles(ctx context.Context, tpl *sandlotv1.Template) {
	if tpl.Spec.Build == nil {
		return
	}
	owner := metav1.OwnerReference{APIVersion: sandlotv1.GroupVersion.String(), Kind: "Template", Name: tpl.Name, UID: tpl.UID}
	for _, st := range tpl.Spec.Build.Steps {
		if st.FilesHash == "" {
			continue
		}
		_, err := s.kube.patchConfigMapMeta(ctx, tpl.Namespace, sandlotv1.BuildFilesName(st.FilesHash), func(m *metav1.PartialObjectMetadata) bool {
			if !managedFiles(m) || slices.ContainsFunc(m.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == owner.UID }) {
				return false
			}
			m.OwnerReferences = append(m.OwnerReferences, owner)
			return true
		})
		if err != nil {
			s.cfg.Log.Warn("own build files (the sweep collects them)", "template", tpl.Namespace+"/"+tpl.Name, "error", err)
		}
	}
}

// storeCopiedFiles writes cp, a public template's files copied into a
// team's namespace, as this API's own: kept buildFilesTTL for the build
// about to copy them, then collected like an upload. Files of that hash
// there already are kept as long.
func (s *Server) storeCopiedFiles(ctx context.Context, cp *corev1.ConfigMap, tpl, hash string) error {
	metav1.SetMetaDataLabel(&cp.ObjectMeta, sandlotv1.LabelBuildFiles, tpl)
	delete(cp.Annotations, AnnotationBuildID) // a build of another namespace
	metav1.SetMetaDataAnnotation(&cp.ObjectMeta, AnnotationExpires, expiryStamp(s.now().Add(buildFilesTTL)))
	metav1.SetMetaDataAnnotation(&cp.ObjectMeta, AnnotationFilesBytes, strconv.Itoa(configMapBytes(cp)))
	for range 2 { // once more if they were swept between
		err := s.kube.Create(ctx, cp)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		if kept, err := s.keepFiles(ctx, cp.Namespace, hash, "", ""); err != nil || kept {
			return err
		}
		cp.ResourceVersion = ""
	}
	return nil
}

// configMapBytes is the size of cm's data.
func configMapBytes(cm *corev1.ConfigMap) int {
	n := 0
	for _, v := range cm.BinaryData {
		n += len(v)
	}
	for _, v := range cm.Data {
		n += len(v)
	}
	return n
}
