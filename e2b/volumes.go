package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Volumes. A team's E2B volume is a Volume object of its namespace (the
// object's name is the volumeID, spec.name the E2B name); its files are
// <VolumeDir>/<namespace>/<uid> on the storage every node mounts (the
// chart's volumes.hostPath), which this API mounts too: it makes and
// removes the directories (volumesweep.go) and serves their content
// (volumecontent.go) to bearers of the volume's token. A team's count of
// volumes is a ResourceQuota on count/volumes.sandlot.dev.

// +kubebuilder:rbac:groups=sandlot.dev,resources=volumes,verbs=get;list;watch;create;delete;patch;update
// +kubebuilder:rbac:groups=sandlot.dev,resources=volumes/status,verbs=get;patch;update

// volumeContentPrefix is the volume content API's (E2B's
// openapi-volumecontent: /volumecontent/{volumeID}/...).
const volumeContentPrefix = "/volumecontent/"

var volumeNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,63}$`)

// volumeBody is E2B's Volume and VolumeAndToken.
type volumeBody struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
}

func (s *Server) volumesEnabled() *apiError {
	if s.cfg.VolumeDir == "" {
		return errorf(http.StatusNotImplemented, "volumes are not enabled on this cluster: the chart's volumes.hostPath names no shared storage")
	}
	return nil
}

func (s *Server) listVolumes(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	if aerr := s.volumesEnabled(); aerr != nil {
		return 0, nil, aerr
	}
	vols, aerr := s.teamVolumes(r.Context(), teamOf(r.Context()))
	if aerr != nil {
		return 0, nil, aerr
	}
	out := make([]volumeBody, 0, len(vols))
	for _, v := range vols {
		out = append(out, volumeBody{VolumeID: v.Name, Name: v.Spec.Name})
	}
	return http.StatusOK, out, nil
}

// teamVolumes are the namespace's volumes not being deleted, oldest first.
func (s *Server) teamVolumes(ctx context.Context, ns string) ([]sandlotv1.Volume, *apiError) {
	var list sandlotv1.VolumeList
	if err := s.kube.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, errorf(http.StatusInternalServerError, "list volumes: %v", err)
	}
	out := slices.DeleteFunc(list.Items, func(v sandlotv1.Volume) bool { return v.DeletionTimestamp != nil })
	slices.SortFunc(out, func(a, b sandlotv1.Volume) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return out, nil
}

func (s *Server) createVolume(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	if aerr := s.volumesEnabled(); aerr != nil {
		return 0, nil, aerr
	}
	var body struct {
		Name string `json:"name"`
	}
	if aerr := decodeBody(r, &body); aerr != nil {
		return 0, nil, aerr
	}
	if !volumeNameRE.MatchString(body.Name) {
		return 0, nil, errorf(http.StatusBadRequest, "field \"name\": %q is not 1 to 63 of [a-zA-Z0-9_-]", body.Name)
	}
	ctx, ns := r.Context(), teamOf(r.Context())
	vols, aerr := s.teamVolumes(ctx, ns)
	if aerr != nil {
		return 0, nil, aerr
	}
	if slices.ContainsFunc(vols, func(v sandlotv1.Volume) bool { return v.Spec.Name == body.Name }) {
		return 0, nil, errorf(http.StatusConflict, "a volume named %q exists", body.Name)
	}
	vol := &sandlotv1.Volume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vol-" + strings.ToLower(rand.Text()[:16]),
		Finalizers: []string{sandlotv1.FinalizerVolumeData}}, Spec: sandlotv1.VolumeSpec{Name: body.Name}}
	if err := s.kube.Create(ctx, vol); err != nil {
		return 0, nil, volumeCreateError(err)
	}
	if aerr := s.readyVolume(ctx, vol); aerr != nil {
		return 0, nil, aerr
	}
	if aerr := s.kube.waitPresent(ctx, vol); aerr != nil {
		return 0, nil, aerr
	}
	return s.volumeWithToken(ctx, vol, http.StatusCreated)
}

// volumeCreateError: a team over its quota is told so (403, as a quota
// refusal); anything else is the API server's trouble.
func volumeCreateError(err error) *apiError {
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota") {
		return errorf(http.StatusForbidden, "the team's volume quota is used up: %v", err)
	}
	return errorf(http.StatusInternalServerError, "create volume: %v", err)
}

func (s *Server) getVolume(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	vol, aerr := s.teamVolume(r.Context(), r.PathValue("volumeID"))
	if aerr != nil {
		return 0, nil, aerr
	}
	return s.volumeWithToken(r.Context(), vol, http.StatusOK)
}

func (s *Server) deleteVolume(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	vol, aerr := s.teamVolume(r.Context(), r.PathValue("volumeID"))
	if aerr != nil {
		return 0, nil, aerr
	}
	uid := vol.UID
	if err := s.kube.Delete(r.Context(), vol, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return 0, nil, errorf(http.StatusInternalServerError, "delete volume %s: %v", vol.Name, err)
	}
	// The files go now; the sweep would take them within volumeSweepEvery.
	if err := s.finalizeVolume(r.Context(), vol); err != nil {
		s.cfg.Log.Warn("delete a volume's files (the sweep retries)", "volume", vol.Name, "error", err)
	}
	// Answered once this API's cache shows it going: a list next omits it.
	if aerr := s.kube.waitGoing(r.Context(), vol); aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusNoContent, nil, nil
}

// teamVolume is the request team's volume of that ID (404 for another
// team's: a team never learns another's volumes exist).
func (s *Server) teamVolume(ctx context.Context, id string) (*sandlotv1.Volume, *apiError) {
	if aerr := s.volumesEnabled(); aerr != nil {
		return nil, aerr
	}
	vol := &sandlotv1.Volume{}
	err := s.kube.Get(ctx, client.ObjectKey{Namespace: teamOf(ctx), Name: id}, vol)
	if apierrors.IsNotFound(err) || (err == nil && vol.DeletionTimestamp != nil) {
		return nil, errorf(http.StatusNotFound, "volume %q not found", id)
	} else if err != nil {
		return nil, errorf(http.StatusInternalServerError, "get volume %s: %v", id, err)
	}
	return vol, nil
}

func (s *Server) volumeWithToken(ctx context.Context, vol *sandlotv1.Volume, code int) (int, any, *apiError) {
	token, err := s.volumeToken(ctx, vol)
	if err != nil {
		return 0, nil, errorf(http.StatusInternalServerError, "the volume's token: %v", err)
	}
	return code, volumeBody{VolumeID: vol.Name, Name: vol.Spec.Name, Token: token}, nil
}

// volumeToken signs the volume (namespace, ID, UID) with the team's first
// stored key: it names one volume, and dies with the keys or the volume.
func (s *Server) volumeToken(ctx context.Context, vol *sandlotv1.Volume) (string, error) {
	keys, err := s.teamKeyValues(ctx, vol.Namespace)
	if err != nil || len(keys) == 0 {
		return "", errorf(http.StatusInternalServerError, "the team has no keys to sign with (%v)", err)
	}
	return volumeSignature(keys[0], vol), nil
}

func volumeSignature(key string, vol *sandlotv1.Volume) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("sandlot volume token\x00" + vol.Namespace + "\x00" + vol.Name + "\x00" + string(vol.UID)))
	return "vt_" + hex.EncodeToString(m.Sum(nil))
}

// teamKeyValues are the team's stored keys (hashes or values), in the
// order of their names.
func (s *Server) teamKeyValues(ctx context.Context, team string) ([]string, error) {
	sets, err := s.keySets(ctx, s.kube)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, set := range sets {
		if set.team != team {
			continue
		}
		names := make([]string, 0, len(set.secret.Data))
		for k := range set.secret.Data {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			out = append(out, strings.TrimSpace(string(set.secret.Data[k])))
		}
	}
	return out, nil
}

// volumeSweepEvery is how often the sweep makes and removes directories.
const volumeSweepEvery = 5 * time.Second

// validateVolumeMounts checks volumeMounts as the CRD will (said here by
// field, not as the API server's CEL message).
func validateVolumeMounts(ms []sandlotv1.VolumeMount) *apiError {
	if len(ms) > sandlotv1.MaxVolumeMounts {
		return errorf(http.StatusBadRequest, "field \"volumeMounts\": %d mounts, at most %d", len(ms), sandlotv1.MaxVolumeMounts)
	}
	paths := map[string]bool{}
	for _, m := range ms {
		switch {
		case !volumeNameRE.MatchString(m.Name):
			return errorf(http.StatusBadRequest, "field \"volumeMounts\": name %q is not 1 to 63 of [a-zA-Z0-9_-]", m.Name)
		case !sandlotv1.ValidVolumeMountPath(m.Path):
			return errorf(http.StatusBadRequest, "field \"volumeMounts\": path %q is not an absolute path (not /, no . or ..)", m.Path)
		case paths[m.Path]:
			return errorf(http.StatusBadRequest, "field \"volumeMounts\": path %q twice", m.Path)
		}
		paths[m.Path] = true
	}
	return nil
}

// mountableVolumes refuses mounts of volumes the team does not have (the
// controller would wait for them): 400 naming the first.
func (s *Server) mountableVolumes(ctx context.Context, ms []sandlotv1.VolumeMount) *apiError {
	if len(ms) == 0 {
		return nil
	}
	if aerr := s.volumesEnabled(); aerr != nil {
		return aerr
	}
	vols, aerr := s.teamVolumes(ctx, teamOf(ctx))
	if aerr != nil {
		return aerr
	}
	for _, m := range ms {
		if !slices.ContainsFunc(vols, func(v sandlotv1.Volume) bool { return v.Spec.Name == m.Name }) {
			return errorf(http.StatusBadRequest, "field \"volumeMounts\": the team has no volume named %q", m.Name)
		}
	}
	return nil
}

// mountsOf are the volumes a sandbox mounts: its spec's, else (a clone or
// fork that named none) those its source snapshot recorded.
func (s *Server) mountsOf(ctx context.Context, sbx *sandlotv1.Sandbox) []sandlotv1.VolumeMount {
	if len(sbx.Spec.VolumeMounts) > 0 {
		return sbx.Spec.VolumeMounts
	}
	snap := &sandlotv1.Snapshot{}
	if name := sbx.Spec.Source.Snapshot; name != "" &&
		s.kube.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: name}, snap) == nil && len(snap.Status.VM.VolumeMounts) > 0 {
		return snap.Status.VM.VolumeMounts
	}
	return []sandlotv1.VolumeMount{}
}
