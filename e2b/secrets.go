package e2b

import (
	"context"
	"crypto/rand"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// E2B's secrets (/secrets): write-only values a team stores for the
// egress rules to resolve at a sandbox's egress (`${e2b.secrets.<name>}`
// placeholders; the rules are not built yet and are refused by name).
// Each is a Kubernetes Secret of the team's namespace labelled
// LabelE2BSecret, its versions data keys v1, v2, ...: readable by whom
// the namespace lets read Secrets, never by the node agents, never sent
// back by this API (every answer is metadata). A team's count of secrets
// is a ResourceQuota on count/secrets.

// LabelE2BSecret marks the Secrets that are a team's E2B secrets.
const LabelE2BSecret = "e2b.sandlot.dev/secret"

const (
	annotationSecretName     = "e2b.sandlot.dev/secret-name"
	annotationSecretMetadata = "e2b.sandlot.dev/secret-metadata"
	annotationSecretVersion  = "e2b.sandlot.dev/secret-version"
	annotationSecretUpdated  = "e2b.sandlot.dev/secret-updated"

	secretIDPrefix = "sec_"
	// maxSecretValue bounds one version; maxSecretVersions the versions
	// kept (the oldest goes): a Secret object stays far below 1 MiB.
	maxSecretValue    = 64 << 10
	maxSecretVersions = 8
	maxSecretMetadata = 32
)

var (
	secretNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	secretIDRE   = regexp.MustCompile(`^sec_[a-z0-9]{16}$`)
)

// secretJSON is E2B's Secret: metadata, never the value.
type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      string            `json:"createdAt"`
	UpdatedAt      string            `json:"updatedAt"`
}

type secretBody struct {
	Name     string            `json:"name"`
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	limit, aerr := pageLimit(r.URL.Query().Get("limit"))
	if aerr != nil {
		return 0, nil, aerr
	}
	list, aerr := s.teamSecrets(r.Context())
	if aerr != nil {
		return 0, nil, aerr
	}
	page, next, aerr := paginate(list, r.URL.Query().Get("nextToken"), limit, func(sec *corev1.Secret) pageKey {
		return pageKey{sec.CreationTimestamp.Time, sec.Name}
	})
	if aerr != nil {
		return 0, nil, aerr
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := make([]secretJSON, 0, len(page))
	for i := range page {
		out = append(out, secretInfo(&page[i]))
	}
	return http.StatusOK, out, nil
}

func (s *Server) teamSecrets(ctx context.Context) ([]corev1.Secret, *apiError) {
	var list corev1.SecretList
	if err := s.kube.List(ctx, &list, client.InNamespace(teamOf(ctx)), client.MatchingLabels{LabelE2BSecret: "true"}); err != nil {
		return nil, errorf(http.StatusInternalServerError, "list secrets: %v", err)
	}
	return slices.DeleteFunc(list.Items, func(s corev1.Secret) bool { return s.DeletionTimestamp != nil }), nil
}

func (s *Server) createSecret(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body secretBody
	if aerr := decodeBody(r, &body); aerr != nil {
		return 0, nil, aerr
	}
	if !secretNameRE.MatchString(body.Name) || strings.HasPrefix(strings.ToLower(body.Name), secretIDPrefix) {
		return 0, nil, errorf(http.StatusBadRequest, "field \"name\": %q is not 1 to 128 of [a-zA-Z0-9_-] (and %s is the IDs' prefix)", body.Name, secretIDPrefix)
	}
	if aerr := checkSecretBody(body); aerr != nil {
		return 0, nil, aerr
	}
	name := strings.ToLower(body.Name)
	ctx := r.Context()
	if existing, aerr := s.findSecret(ctx, name); aerr == nil && existing != nil {
		return 0, nil, errorf(http.StatusConflict, "a secret named %q exists", name)
	}
	id := strings.ToLower(rand.Text()[:16])
	now := s.now().UTC().Format(time.RFC3339)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: teamOf(ctx), Name: "e2b-secret-" + id,
		Labels:      map[string]string{LabelE2BSecret: "true"},
		Annotations: map[string]string{annotationSecretName: name, annotationSecretVersion: "1", annotationSecretUpdated: now}},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"v1": []byte(*body.Value)}}
	setSecretMetadata(sec, body.Metadata)
	if err := s.kube.Create(ctx, sec); err != nil {
		return 0, nil, kubeError("create secret "+name, err)
	}
	if aerr := s.kube.waitPresent(ctx, sec); aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusCreated, secretInfo(sec), nil
}
