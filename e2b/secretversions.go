package e2b

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// updateSecret stores a new version (POST /secrets/{secretID}), the
// oldest beyond maxSecretVersions dropped; metadata, when sent, replaces.
func (s *Server) updateSecret(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body secretBody
	if aerr := decodeBody(r, &body); aerr != nil {
		return 0, nil, aerr
	}
	if body.Name != "" {
		return 0, nil, errorf(http.StatusBadRequest, "field \"name\": a secret's name does not change")
	}
	if aerr := checkSecretBody(body); aerr != nil {
		return 0, nil, aerr
	}
	ctx := r.Context()
	var out *corev1.Secret
	var aerr *apiError
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sec, e := s.secretByRef(ctx, r.PathValue("secretID"))
		if aerr = e; e != nil {
			return nil
		}
		if sec.Data == nil { // a labelled Secret made by hand: no versions yet
			sec.Data = map[string][]byte{}
		}
		if sec.Annotations == nil {
			sec.Annotations = map[string]string{}
		}
		v, _ := strconv.ParseInt(sec.Annotations[annotationSecretVersion], 10, 64)
		v++
		sec.Data["v"+strconv.FormatInt(v, 10)] = []byte(*body.Value)
		delete(sec.Data, "v"+strconv.FormatInt(v-maxSecretVersions, 10))
		sec.Annotations[annotationSecretVersion] = strconv.FormatInt(v, 10)
		sec.Annotations[annotationSecretUpdated] = s.now().UTC().Format(time.RFC3339)
		if body.Metadata != nil {
			setSecretMetadata(sec, body.Metadata)
		}
		out = sec
		return s.kube.Update(ctx, sec)
	})
	if aerr != nil {
		return 0, nil, aerr
	}
	if err != nil {
		return 0, nil, kubeError("update secret", err)
	}
	if aerr := s.kube.waitSeen(ctx, out); aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusOK, secretInfo(out), nil
}

func (s *Server) getSecret(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	sec, aerr := s.secretByRef(r.Context(), r.PathValue("secretID"))
	if aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusOK, secretInfo(sec), nil
}

func (s *Server) deleteSecret(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	sec, aerr := s.secretByRef(r.Context(), r.PathValue("secretID"))
	if aerr != nil {
		return 0, nil, aerr
	}
	uid := sec.UID
	if err := s.kube.Delete(r.Context(), sec, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return 0, nil, kubeError("delete secret", err)
	}
	if aerr := s.kube.waitGoing(r.Context(), sec); aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusNoContent, nil, nil
}

// secretByRef is the team's secret of that ID (sec_...) or name (a copy:
// the caller may change it); 404 else, another team's included.
func (s *Server) secretByRef(ctx context.Context, ref string) (*corev1.Secret, *apiError) {
	var sec *corev1.Secret
	if secretIDRE.MatchString(ref) {
		got := &corev1.Secret{}
		err := s.kube.Get(ctx, client.ObjectKey{Namespace: teamOf(ctx), Name: "e2b-secret-" + strings.TrimPrefix(ref, secretIDPrefix)}, got)
		if err == nil && got.Labels[LabelE2BSecret] == "true" && got.DeletionTimestamp == nil {
			sec = got
		}
	} else {
		var aerr *apiError
		if sec, aerr = s.findSecret(ctx, strings.ToLower(ref)); aerr != nil {
			return nil, aerr
		}
	}
	if sec == nil {
		return nil, errorf(http.StatusNotFound, "secret %q not found", ref)
	}
	return sec.DeepCopy(), nil
}

// findSecret is the team's secret named name, nil when none.
func (s *Server) findSecret(ctx context.Context, name string) (*corev1.Secret, *apiError) {
	list, aerr := s.teamSecrets(ctx)
	if aerr != nil {
		return nil, aerr
	}
	for i := range list {
		if list[i].Annotations[annotationSecretName] == name {
			return &list[i], nil
		}
	}
	return nil, nil
}

// checkSecretBody bounds the value and E2B's metadata limits.
func checkSecretBody(b secretBody) *apiError {
	if b.Value == nil {
		return errorf(http.StatusBadRequest, "field \"value\" is required")
	}
	if len(*b.Value) > maxSecretValue {
		return errorf(http.StatusBadRequest, "field \"value\": %d bytes, at most %d", len(*b.Value), maxSecretValue)
	}
	total := 0
	for k, v := range b.Metadata {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return errorf(http.StatusBadRequest, "field \"metadata\": key %.40q: keys are 1 to 128 bytes, values at most 1024", k)
		}
		total += len(k) + len(v)
	}
	if len(b.Metadata) > maxSecretMetadata || total > 8192 {
		return errorf(http.StatusBadRequest, "field \"metadata\": at most %d entries and 8192 bytes", maxSecretMetadata)
	}
	return nil
}

func setSecretMetadata(sec *corev1.Secret, md map[string]string) {
	if md == nil {
		md = map[string]string{}
	}
	sec.Annotations[annotationSecretMetadata] = string(mustJSON(md))
}

// secretInfo is sec's E2B metadata: never a value.
func secretInfo(sec *corev1.Secret) secretJSON {
	v, _ := strconv.ParseInt(sec.Annotations[annotationSecretVersion], 10, 64)
	md := map[string]string{}
	_ = json.Unmarshal([]byte(sec.Annotations[annotationSecretMetadata]), &md)
	updated := sec.Annotations[annotationSecretUpdated]
	if updated == "" {
		updated = sec.CreationTimestamp.UTC().Format(time.RFC3339)
	}
	return secretJSON{SecretID: secretIDPrefix + strings.TrimPrefix(sec.Name, "e2b-secret-"), Name: sec.Annotations[annotationSecretName],
		CurrentVersion: v, Metadata: md, CreatedAt: sec.CreationTimestamp.UTC().Format(time.RFC3339), UpdatedAt: updated}
}
