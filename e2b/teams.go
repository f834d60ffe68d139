package e2b

import (
	"context"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Teams. An API key belongs to a team, and a team is a namespace: the
// API's own (its keys in Config.KeysSecret) and each of Config.Teams (its
// keys in the Secrets of the API's namespace labelled LabelTeam=<team>). A
// request acts in its key's team's namespace only: another team's sandbox,
// snapshot or template is not found. A team's sandbox limit is a
// ResourceQuota on count/sandboxes.sandlot.dev in its namespace.

// LabelTeam marks a keys Secret with the team (namespace) its keys are of.
const LabelTeam = "sandlot.dev/team"

type teamKey struct{}

func withTeam(ctx context.Context, ns string) context.Context {
	return context.WithValue(ctx, teamKey{}, ns)
}

// teamOf is the namespace of the request's team; "" outside API calls
// (the proxy, which finds any team's sandbox and checks its token).
func teamOf(ctx context.Context) string {
	ns, _ := ctx.Value(teamKey{}).(string)
	return ns
}

// Namespaces are the namespaces served: the API's own, then the teams'.
func (c *Config) Namespaces() []string {
	out := []string{c.Namespace}
	for _, t := range c.Teams {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// keyTeam is the team whose key this is. Every stored key of every team
// is compared (keyMatches: in constant time), none skipped. A key the
// cache does not hold yet (issued a moment ago) is looked up once more in
// the API server, rate limited.
func (s *Server) keyTeam(ctx context.Context, key string) (string, *apiError) {
	team, _, err := s.matchKey(ctx, s.kube, key)
	if team == "" && s.kube.direct != nil && s.rereads.allow(s.now()) {
		team, _, err = s.matchKey(ctx, s.kube.direct, key)
	}
	if err != nil {
		return "", errorf(http.StatusUnauthorized, "invalid API key (no keys issued: %v)", err)
	}
	if team == "" {
		return "", errorf(http.StatusUnauthorized, "invalid API key")
	}
	return team, nil
}

// storedKey is the value a keys Secret stores for an authorized key:
// from the cache, or from the API server for a key issued a moment ago.
func (s *Server) storedKey(ctx context.Context, key string) (string, *apiError) {
	_, stored, err := s.matchKey(ctx, s.kube, key)
	if stored == "" && err == nil && s.kube.direct != nil {
		_, stored, err = s.matchKey(ctx, s.kube.direct, key)
	}
	if err != nil || stored == "" {
		return "", errorf(http.StatusUnauthorized, "invalid API key")
	}
	return stored, nil
}

// matchKey is the team of key and the value its Secret stores for it
// ("" for a key no Secret holds).
func (s *Server) matchKey(ctx context.Context, r client.Reader, key string) (team, stored string, err error) {
	sets, err := s.keySets(ctx, r)
	if err != nil {
		return "", "", err
	}
	for _, set := range sets {
		for _, v := range set.secret.Data {
			if keyMatches(key, string(v)) {
				team, stored = set.team, strings.TrimSpace(string(v))
			}
		}
	}
	return team, stored, nil
}

type keySet struct {
	team   string
	secret *corev1.Secret
}

// keySets are the keys Secrets of the teams served; a Secret labelled for
// a namespace that is not served gives no access.
func (s *Server) keySets(ctx context.Context, r client.Reader) ([]keySet, error) {
	var sets []keySet
	own := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: s.cfg.Namespace, Name: s.cfg.KeysSecret}, own)
	if err == nil {
		sets = append(sets, keySet{s.cfg.Namespace, own})
	}
	labelled := &corev1.SecretList{}
	if lerr := r.List(ctx, labelled, client.InNamespace(s.cfg.Namespace), client.HasLabels{LabelTeam}); lerr != nil {
		return nil, lerr
	}
	for i := range labelled.Items {
		sec := &labelled.Items[i]
		if team := sec.Labels[LabelTeam]; slices.Contains(s.cfg.Teams, team) && sec.Name != s.cfg.KeysSecret {
			sets = append(sets, keySet{team, sec})
		}
	}
	if len(sets) == 0 {
		return nil, err
	}
	return sets, nil
}

// teams answers GET /teams: the key's own team, the only one it sees.
func (s *Server) teams(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	team := teamOf(r.Context())
	return http.StatusOK, []map[string]any{{"teamID": team, "name": team, "isDefault": true,
		"apiKey": r.Header.Get("X-API-KEY")}}, nil
}
