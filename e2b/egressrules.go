package e2b

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// E2B's network.rules map onto spec.network.rules. A value's
// ${e2b.secrets.NAME} names a team secret (/secrets): this API copies its
// current value into a Secret of the sandbox's own (spec.network.
// secretName, owned by the Sandbox, made at create) that the sandbox's
// pod mounts for its node to read; the value never enters the Sandbox,
// its pod's annotations or the guest. A network update rewrites that
// Secret. A rotated team secret reaches a sandbox at its next network
// update (the copy is taken then).

// LabelEgressSecret marks the Secrets this API makes for rules.
const LabelEgressSecret = "e2b.sandlot.dev/egress"

// ruleJSON is E2B's SandboxNetworkRule.
type ruleJSON struct {
	Transform *struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
}

// specRules is E2B's rules as spec.network.rules (domains lower-cased,
// sorted; secret names lower-cased, as /secrets keeps them), or why not.
func specRules(prefix string, raw json.RawMessage) ([]sandlotv1.EgressRule, *apiError) {
	if !setNonEmpty(raw) {
		return nil, nil
	}
	var in map[string][]ruleJSON
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, errorf(http.StatusBadRequest, "field %q: %v", prefix+"rules", err)
	}
	var out []sandlotv1.EgressRule
	for domain, rules := range in {
		at := fmt.Sprintf("%srules[%q]", prefix, domain)
		if len(rules) != 1 || rules[0].Transform == nil || len(rules[0].Transform.Headers) == 0 {
			return nil, errorf(http.StatusBadRequest, "field %s: one rule per domain, with transform.headers", at)
		}
		r := sandlotv1.EgressRule{Domain: strings.TrimSuffix(strings.ToLower(domain), ".")}
		for name, value := range rules[0].Transform.Headers {
			value = sandlotv1.SecretPlaceholder.ReplaceAllStringFunc(value, strings.ToLower)
			r.Headers = append(r.Headers, sandlotv1.HeaderTransform{Name: name, Value: value})
		}
		slices.SortFunc(r.Headers, func(a, b sandlotv1.HeaderTransform) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b sandlotv1.EgressRule) int { return strings.Compare(a.Domain, b.Domain) })
	return out, nil
}

// rulesJSON is spec.network.rules as E2B shows them.
func rulesJSON(rules []sandlotv1.EgressRule) map[string][]ruleJSON {
	if len(rules) == 0 {
		return nil
	}
	out := map[string][]ruleJSON{}
	for _, r := range rules {
		var rj ruleJSON
		rj.Transform = &struct {
			Headers map[string]string `json:"headers"`
		}{Headers: map[string]string{}}
		for _, h := range r.Headers {
			rj.Transform.Headers[h.Name] = h.Value
		}
		out[r.Domain] = []ruleJSON{rj}
	}
	return out
}

// egressData is the current value of each team secret the rules name,
// and the egress proxy's password (if any).
func (s *Server) egressData(ctx context.Context, n *sandlotv1.SandboxNetwork, password string) (map[string][]byte, *apiError) {
	data := map[string][]byte{}
	if password != "" {
		data[sandlotv1.EgressProxyPasswordKey] = []byte(password)
	}
	for _, key := range n.SecretKeys() {
		sec, aerr := s.findSecret(ctx, key)
		if aerr != nil {
			return nil, aerr
		}
		if sec == nil {
			return nil, errorf(http.StatusBadRequest, "field \"network.rules\": secret %q (${e2b.secrets.%s}) not found", key, key)
		}
		v, ok := sec.Data["v"+sec.Annotations[annotationSecretVersion]]
		if !ok {
			return nil, errorf(http.StatusInternalServerError, "secret %q has no current version", key)
		}
		data[key] = v
	}
	return data, nil
}

// prepareEgressSecret makes the Secret a new sandbox's rules name (and
// its egress proxy's password), when there is any, and sets
// spec.network.secretName to it.
func (s *Server) prepareEgressSecret(ctx context.Context, ns string, n *sandlotv1.SandboxNetwork, password string) *apiError {
	if n == nil || len(n.SecretKeys()) == 0 && password == "" {
		return nil
	}
	data, aerr := s.egressData(ctx, n, password)
	if aerr != nil {
		return aerr
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2b-egress-" + strings.ToLower(rand.Text()[:16]),
		Labels: map[string]string{LabelEgressSecret: "true"}}, Data: data}
	if err := s.kube.Create(ctx, sec); err != nil {
		return kubeError("create the secret of the network rules", err)
	}
	n.SecretName = sec.Name
	return nil
}

// ownEgressSecret makes the sandbox own its rules' Secret (deleted with
// it); after a failed create, drop deletes it.
func (s *Server) ownEgressSecret(ctx context.Context, sbx *sandlotv1.Sandbox, drop bool) {
	n := sbx.Spec.Network
	if n == nil || n.SecretName == "" {
		return
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sbx.Namespace, Name: n.SecretName}}
	if drop {
		if err := s.kube.Delete(ctx, sec); err != nil && !apierrors.IsNotFound(err) {
			s.cfg.Log.Warn("delete the rules' secret of a sandbox not created", "secret", sbx.Namespace+"/"+n.SecretName, "error", err)
		}
		return
	}
	owner := metav1.OwnerReference{APIVersion: sandlotv1.GroupVersion.String(), Kind: "Sandbox", Name: sbx.Name, UID: sbx.UID}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{owner}}})
	if err := s.kube.Patch(ctx, sec, client.RawPatch(types.MergePatchType, patch)); err != nil {
		// The sandbox works; its Secret outlives it (labelled LabelEgressSecret).
		s.cfg.Log.Warn("own the rules' secret by its sandbox", "secret", sbx.Namespace+"/"+n.SecretName, "error", err)
	}
}

// updateEgressSecret rewrites a running sandbox's rules' Secret for the
// rules next (and the proxy's password): exactly their keys. A sandbox
// made without one cannot take secrets (its pod mounts what it had when
// it started).
func (s *Server) updateEgressSecret(ctx context.Context, sbx *sandlotv1.Sandbox, next *sandlotv1.SandboxNetwork, password string) *apiError {
	name := ""
	if sbx.Spec.Network != nil {
		name = sbx.Spec.Network.SecretName
	}
	if next != nil {
		next.SecretName = name
	}
	if name == "" {
		if next != nil && (len(next.SecretKeys()) > 0 || password != "") {
			return errorf(http.StatusBadRequest, "fields \"rules\" and \"egressProxy.password\": secrets need a sandbox created with "+
				"a secret rule or a proxy password (sandlot mounts their Secret when the sandbox starts); this one was not")
		}
		return nil
	}
	data := map[string][]byte{}
	if next != nil {
		var aerr *apiError
		if data, aerr = s.egressData(ctx, next, password); aerr != nil {
			return aerr
		}
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sec := &corev1.Secret{}
		if err := s.kube.direct.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: name}, sec); err != nil {
			return err
		}
		sec.Data = data
		return s.kube.Update(ctx, sec)
	})
	if err != nil {
		return kubeError("update the secret of the network rules", err)
	}
	return nil
}
