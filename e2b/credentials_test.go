package e2b

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// bearer is the header pair of an access token.
func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// TestAccessTokensManageKeys: an API key may not touch /api-keys or
// /access-tokens; a team's access token lists, makes, renames and
// deletes its keys and tokens, a made key works at once and a deleted one
// stops; a token is no API key; X-Team-ID must be its team.
func TestAccessTokensManageKeys(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	for _, req := range [][2]string{{"GET", "/api-keys"}, {"POST", "/api-keys"}, {"POST", "/access-tokens"}} {
		call(t, f.url, req[0], req[1], map[string]string{"name": "x"}, "X-API-KEY", f.key).wantError(t, http.StatusUnauthorized, "needs an access token")
	}
	token, err := IssueAccessToken(ctx, f.c, testNS, "sandlot-api-keys", testNS, "admin")
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "the token works", func() error {
		if r := call(t, f.url, "GET", "/api-keys", nil, bearer(token)...); r.code != http.StatusOK {
			return fmt.Errorf("%d %s", r.code, r.body)
		}
		return nil
	})
	call(t, f.url, "GET", "/v2/sandboxes", nil, "X-API-KEY", token).wantError(t, http.StatusUnauthorized, "invalid API key")
	call(t, f.url, "GET", "/api-keys", nil, "Authorization", "Bearer sk_e2b_0000").wantError(t, http.StatusUnauthorized, "invalid access token")
	call(t, f.url, "GET", "/api-keys", nil, append(bearer(token), "X-Team-ID", "team-b")...).wantError(t, http.StatusForbidden, "not this credential's team")

	made := decode[teamAPIKeyJSON](t, call(t, f.url, "POST", "/api-keys", map[string]string{"name": "ci-2"}, bearer(token)...), http.StatusCreated)
	if !strings.HasPrefix(made.Key, "e2b_") || made.Mask.Prefix != "e2b_" || made.Mask.MaskedValueSuffix != made.Key[len(made.Key)-4:] {
		t.Fatalf("created %+v", made)
	}
	if r := call(t, f.url, "GET", "/v2/sandboxes", nil, "X-API-KEY", made.Key); r.code != http.StatusOK {
		t.Errorf("the new key: %d %s", r.code, r.body)
	}
	call(t, f.url, "PATCH", "/api-keys/"+made.ID, map[string]string{"name": "renamed"}, bearer(token)...)
	listed := decode[[]teamAPIKeyJSON](t, call(t, f.url, "GET", "/api-keys", nil, bearer(token)...), http.StatusOK)
	names := map[string]string{}
	for _, k := range listed {
		if k.Key != "" {
			t.Errorf("a listed key shows its value: %+v", k)
		}
		names[k.ID] = k.Name
	}
	if names[made.ID] != "renamed" || !containsName(names, "ci") {
		t.Errorf("listed %v, want the fixture's key ci and %s renamed", names, made.ID)
	}
	if r := call(t, f.url, "DELETE", "/api-keys/"+made.ID, nil, bearer(token)...); r.code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	poll.Eventually(t, 10*time.Second, "the deleted key stops", func() error {
		if r := call(t, f.url, "GET", "/v2/sandboxes", nil, "X-API-KEY", made.Key); r.code != http.StatusUnauthorized {
			return fmt.Errorf("%d", r.code)
		}
		return nil
	})
	call(t, f.url, "DELETE", "/api-keys/"+made.ID, nil, bearer(token)...).wantError(t, http.StatusNotFound, "not found")

	second := decode[accessTokenJSON](t, call(t, f.url, "POST", "/access-tokens", map[string]string{"name": "ci"}, bearer(token)...), http.StatusCreated)
	if r := call(t, f.url, "GET", "/v2/sandboxes", nil, bearer(second.Token)...); r.code != http.StatusOK {
		t.Errorf("a token on a team route: %d %s", r.code, r.body)
	}
	if r := call(t, f.url, "DELETE", "/access-tokens/"+second.ID, nil, bearer(token)...); r.code != http.StatusNoContent {
		t.Fatalf("delete the token: %d %s", r.code, r.body)
	}
	call(t, f.url, "POST", "/api-keys", map[string]string{"name": ""}, bearer(token)...).wantError(t, http.StatusBadRequest, `field "name"`)
}

func containsName(m map[string]string, name string) bool {
	for _, n := range m {
		if n == name {
			return true
		}
	}
	return false
}

// TestAccessTokensStayInTheirTeam: a team's token neither lists nor
// renames nor deletes another team's keys, nor its tokens.
func TestAccessTokensStayInTheirTeam(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	base, _, _ := teamServer(t, f, "team-tok", Config{})
	tokB, err := IssueAccessToken(ctx, f.c, testNS, "sandlot-api-keys", "team-tok", "b-admin")
	if err != nil {
		t.Fatal(err)
	}
	tokA, err := IssueAccessToken(ctx, f.c, testNS, "sandlot-api-keys", testNS, "a-admin")
	if err != nil {
		t.Fatal(err)
	}
	var mine []teamAPIKeyJSON
	poll.Eventually(t, 10*time.Second, "team A's keys", func() error {
		r := call(t, f.url, "GET", "/api-keys", nil, bearer(tokA)...)
		if r.code != http.StatusOK {
			return fmt.Errorf("%d %s", r.code, r.body)
		}
		mine = decode[[]teamAPIKeyJSON](t, r, http.StatusOK)
		return nil
	})
	poll.Eventually(t, 10*time.Second, "team B's token on its API", func() error {
		if r := call(t, base, "GET", "/api-keys", nil, bearer(tokB)...); r.code != http.StatusOK {
			return fmt.Errorf("%d %s", r.code, r.body)
		}
		return nil
	})
	theirs := decode[[]teamAPIKeyJSON](t, call(t, base, "GET", "/api-keys", nil, bearer(tokB)...), http.StatusOK)
	for _, k := range theirs {
		for _, a := range mine {
			if k.ID == a.ID {
				t.Errorf("team B lists team A's key %+v", k)
			}
		}
	}
	for _, a := range mine {
		call(t, base, "DELETE", "/api-keys/"+a.ID, nil, bearer(tokB)...).wantError(t, http.StatusNotFound, "not found")
		call(t, base, "PATCH", "/api-keys/"+a.ID, map[string]string{"name": "x"}, bearer(tokB)...).wantError(t, http.StatusNotFound, "not found")
	}
	if r := call(t, f.url, "GET", "/v2/sandboxes", nil, "X-API-KEY", f.key); r.code != http.StatusOK {
		t.Errorf("team A's key after team B's attempts: %d", r.code)
	}
}
