package e2b

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The routes of a team's credentials (credentials.go): each needs an
// access token, never an API key.

type tokenAuthKey struct{}

func withTokenAuth(ctx context.Context) context.Context {
	return context.WithValue(ctx, tokenAuthKey{}, true)
}

func byToken(ctx context.Context) bool { v, _ := ctx.Value(tokenAuthKey{}).(bool); return v }

// authorizeRequest is the request's team: by X-API-KEY, else by an access
// token (Authorization: Bearer); X-Team-ID, when sent, must name it.
func (s *Server) authorizeRequest(r *http.Request) (context.Context, *apiError) {
	ctx := r.Context()
	var team string
	var err *apiError
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && r.Header.Get("X-API-KEY") == "" {
		team, err = s.bearerTeam(ctx, strings.TrimSpace(token))
		ctx = withTokenAuth(ctx)
	} else {
		team, err = s.authorize(r)
	}
	if err != nil {
		return nil, err
	}
	if id := r.Header.Get("X-Team-ID"); id != "" && id != team {
		return nil, errorf(http.StatusForbidden, "team %q is not this credential's team", id)
	}
	return withTeam(ctx, team), nil
}

// bearerTeam is the team of an access token: from the cache, or once more
// from the API server (rate limited) for a token made a moment ago.
func (s *Server) bearerTeam(ctx context.Context, token string) (string, *apiError) {
	team, err := s.tokenTeam(ctx, s.kube, token)
	if team == "" && err == nil && s.kube.direct != nil && s.rereads.allow(s.now()) {
		team, err = s.tokenTeam(ctx, s.kube.direct, token)
	}
	if err != nil {
		return "", errorf(http.StatusInternalServerError, "read access tokens: %v", err)
	}
	if team == "" {
		return "", errorf(http.StatusUnauthorized, "invalid access token")
	}
	return team, nil
}

func requireToken(r *http.Request) *apiError {
	if !byToken(r.Context()) {
		return errorf(http.StatusUnauthorized, "%s %s needs an access token (Authorization: Bearer sk_e2b_...), not an API key", r.Method, r.URL.Path)
	}
	return nil
}

type teamAPIKeyJSON struct {
	ID        string    `json:"id"`
	Key       string    `json:"key,omitempty"` // only when created
	Name      string    `json:"name"`
	Mask      maskJSON  `json:"mask"`
	CreatedAt string    `json:"createdAt"`
	CreatedBy *struct{} `json:"createdBy"`
	LastUsed  *string   `json:"lastUsed"`
}

type accessTokenJSON struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Token     string   `json:"token"`
	Mask      maskJSON `json:"mask"`
	CreatedAt string   `json:"createdAt"`
}

type nameBody struct {
	Name string `json:"name"`
}

// credentialName reads and checks a {name} body.
func credentialName(r *http.Request) (string, *apiError) {
	var body nameBody
	if err := decodeBody(r, &body); err != nil {
		return "", err
	}
	if n := strings.TrimSpace(body.Name); n == "" || len(n) > maxNameLen {
		return "", errorf(http.StatusBadRequest, "field \"name\": want 1 to %d characters", maxNameLen)
	}
	return strings.TrimSpace(body.Name), nil
}

func keyJSON(c credential, raw string) teamAPIKeyJSON {
	return teamAPIKeyJSON{ID: c.ID, Key: raw, Name: c.Info.Name, Mask: c.Info.Mask, CreatedAt: c.Info.CreatedAt.UTC().Format(time.RFC3339)}
}

// listAPIKeys answers GET /api-keys: the team's keys, masked.
func (s *Server) listAPIKeys(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	if err := requireToken(r); err != nil {
		return 0, nil, err
	}
	all, err := s.credentials(r.Context(), s.kube, apiKeys, teamOf(r.Context()))
	if err != nil {
		return 0, nil, credentialError("list API keys", err)
	}
	out := make([]teamAPIKeyJSON, 0, len(all))
	for _, c := range all {
		out = append(out, keyJSON(c, ""))
	}
	return http.StatusOK, out, nil
}

// create makes a credential of kind for the token's team from a {name}
// body; the raw value is shown this once.
func (s *Server) create(r *http.Request, kind credentialKind) (credential, string, *apiError) {
	if err := requireToken(r); err != nil {
		return credential{}, "", err
	}
	name, aerr := credentialName(r)
	if aerr != nil {
		return credential{}, "", aerr
	}
	team := teamOf(r.Context())
	c, raw, err := s.addCredential(r.Context(), kind, team, name)
	if err != nil {
		return credential{}, "", credentialError("create an "+kind.noun, err)
	}
	// Answered once this API's cache holds it: the credential works on
	// its first request (the cache is what every request is checked in).
	aerr = s.kube.waitFor(r.Context(), 10*time.Second, "the new "+kind.noun+" in the cache", func() (bool, *apiError) {
		all, err := s.credentials(r.Context(), s.kube, kind, team)
		if err != nil {
			return false, credentialError("read the "+kind.noun+"s", err)
		}
		return slices.ContainsFunc(all, func(x credential) bool { return x.ID == c.ID }), nil
	})
	return c, raw, aerr
}

// createAPIKey answers POST /api-keys.
func (s *Server) createAPIKey(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	c, raw, err := s.create(r, apiKeys)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, keyJSON(c, raw), nil
}

// changeAPIKey answers PATCH (rename) and DELETE /api-keys/{apiKeyID}.
func (s *Server) changeAPIKey(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	return s.change(r, apiKeys, r.PathValue("apiKeyID"))
}

// createAccessToken answers POST /access-tokens: another token of the
// token's team.
func (s *Server) createAccessToken(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	c, raw, err := s.create(r, accessTokens)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, accessTokenJSON{ID: c.ID, Name: c.Info.Name, Token: raw, Mask: c.Info.Mask,
		CreatedAt: c.Info.CreatedAt.UTC().Format(time.RFC3339)}, nil
}

// deleteAccessToken answers DELETE /access-tokens/{accessTokenID}.
func (s *Server) deleteAccessToken(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	return s.change(r, accessTokens, r.PathValue("accessTokenID"))
}

// change renames (PATCH) or removes (DELETE) one of the team's
// credentials; another team's is not found.
func (s *Server) change(r *http.Request, kind credentialKind, id string) (int, any, *apiError) {
	if err := requireToken(r); err != nil {
		return 0, nil, err
	}
	name, code := "", http.StatusNoContent
	if r.Method == http.MethodPatch {
		var aerr *apiError
		if name, aerr = credentialName(r); aerr != nil {
			return 0, nil, aerr
		}
		code = http.StatusOK
	}
	found, err := s.changeCredential(r.Context(), kind, teamOf(r.Context()), id, name)
	switch {
	case err != nil:
		return 0, nil, credentialError("change "+kind.noun+" "+id, err)
	case !found:
		return 0, nil, errorf(http.StatusNotFound, "%s %q not found", kind.noun, id)
	}
	return code, nil, nil
}
