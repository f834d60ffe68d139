package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// A build's registry credentials (the SDK's fromImage(image, {username,
// password})) become an image pull Secret of the team's namespace that
// the template names in spec.imagePullSecrets: the kubelet pulls the
// template's image with them, and only that namespace's pods can.

// imageRegistry is E2B's fromImageRegistry.
type imageRegistry struct {
	Type     string `json:"type"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// labelRegistryOf marks a pull Secret with the template it is of.
const labelRegistryOf = "e2b.sandlot.dev/registry-of"

// registrySecretName is the pull Secret of template name's registry.
func registrySecretName(name string) string { return name + "-registry" }

// parseRegistry reads fromImageRegistry (nil when absent); only the
// registry type (username and password) is taken.
func parseRegistry(raw json.RawMessage) (*imageRegistry, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var reg imageRegistry
	if err := json.Unmarshal(raw, &reg); err != nil {
		return nil, errorf(http.StatusBadRequest, "fromImageRegistry: %v", err)
	}
	switch {
	case reg.Type != "registry":
		return nil, errorf(http.StatusBadRequest, "fromImageRegistry type %q is not supported: give a registry's username "+
			"and password (type registry), or store the credentials as an image pull Secret of your namespace", reg.Type)
	case reg.Username == "" || reg.Password == "":
		return nil, errorf(http.StatusBadRequest, "fromImageRegistry: give both username and password")
	}
	return &reg, nil
}

// registryHost is the registry an image reference names, as a Docker
// config keys it (Docker Hub's for a reference without a host).
func registryHost(image string) string {
	host, _, found := strings.Cut(image, "/")
	if !found || (!strings.ContainsAny(host, ".:") && host != "localhost") {
		return "https://index.docker.io/v1/"
	}
	return host
}

// putRegistrySecret writes the pull Secret of template name's image.
func (s *Server) putRegistrySecret(ctx context.Context, ns, name, image string, reg *imageRegistry) *apiError {
	auth := base64.StdEncoding.EncodeToString([]byte(reg.Username + ":" + reg.Password))
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{registryHost(image): map[string]string{
		"username": reg.Username, "password": reg.Password, "auth": auth}}})
	if err != nil {
		return errorf(http.StatusInternalServerError, "encode registry credentials: %v", err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: registrySecretName(name), Namespace: ns,
		Labels: map[string]string{labelRegistryOf: name}},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}}
	cur := &corev1.Secret{}
	switch err := s.kube.direct.Get(ctx, client.ObjectKeyFromObject(sec), cur); {
	case apierrors.IsNotFound(err):
		err = s.kube.Create(ctx, sec)
		if err != nil {
			return kubeError("create pull secret "+sec.Name, err)
		}
	case err != nil:
		return kubeError("get pull secret "+sec.Name, err)
	case cur.Labels[labelRegistryOf] != name || cur.Type != corev1.SecretTypeDockerConfigJson:
		return errorf(http.StatusConflict, "secret %s exists and is not template %s's pull secret: rename or delete it", sec.Name, name)
	default:
		cur.Data = sec.Data
		if err := s.kube.Update(ctx, cur); err != nil {
			return kubeError("update pull secret "+sec.Name, err)
		}
	}
	return nil
}

// withRegistry records the build's credentials for spec's image and names
// them in spec; without credentials, spec is left as it is.
func (s *Server) withRegistry(r *http.Request, name string, raw json.RawMessage, spec *sandlotv1.TemplateSpec) *apiError {
	reg, aerr := parseRegistry(raw)
	if aerr != nil || reg == nil {
		return aerr
	}
	if err := s.putRegistrySecret(r.Context(), teamOf(r.Context()), name, spec.Image, reg); err != nil {
		return err
	}
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: registrySecretName(name)}}
	return nil
}

// adoptRegistrySecret makes tpl the owner of its build's pull Secret, so
// that the Secret goes with it; best effort (a Secret left is the team's
// and a later build adopts it).
func (s *Server) adoptRegistrySecret(ctx context.Context, tpl *sandlotv1.Template) {
	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: tpl.Namespace, Name: registrySecretName(tpl.Name)}
	if err := s.kube.direct.Get(ctx, key, sec); err != nil || sec.Labels[labelRegistryOf] != tpl.Name ||
		metav1.IsControlledBy(sec, tpl) {
		return
	}
	sec.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(tpl, sandlotv1.GroupVersion.WithKind("Template"))}
	if err := s.kube.Update(ctx, sec); err != nil {
		s.cfg.Log.Warn("the build's pull secret stays without its template as owner", "secret", key, "error", err)
	}
}
