package files

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	opRead  = "read"
	opWrite = "write"
)

// Signature is the SDK's signature for a pre-authorised /files URL
// (uploadUrl/downloadUrl): "v1_" and the unpadded standard base64 of
// sha256("<path>:<read|write>:<username>:<accessToken>[:<expiration>]").
// username is the `username` query value ("" when absent).
func Signature(filePath, op, username, token string, expiration *int64) string {
	parts := []string{filePath, op, username, token}
	if expiration != nil {
		parts = append(parts, strconv.FormatInt(*expiration, 10))
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// authorize admits a request as envd does for /files: a matching
// X-Access-Token, or else a valid, unexpired signature; anything when the
// identity has no token and says it is open (E2B secure=false). With no
// identity yet, or one with neither a token nor Open, nothing passes: a
// signature cannot be checked against no token. /files must stay
// reachable without the header (signed URLs carry none), so this check
// is not left to the server's token middleware alone.
func (h *handler) authorize(r *http.Request, op string) error {
	if h.cfg.Identity == nil {
		return statusf(http.StatusUnauthorized, "the sandbox has no identity to check access against")
	}
	token, open := h.cfg.Identity.Access()
	if open {
		return nil
	}
	if token == "" {
		return statusf(http.StatusUnauthorized, "the sandbox has no access token yet: access refused")
	}
	if got := r.Header.Get("X-Access-Token"); got != "" {
		// Against the token read above: one snapshot of the identity
		// decides the whole request.
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
			return nil
		}
		return statusf(http.StatusUnauthorized, "access token present in header but does not match")
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return statusf(http.StatusUnauthorized, "missing signature query parameter")
	}
	var exp *int64
	if raw := q.Get("signature_expiration"); raw != "" {
		v, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return statusf(http.StatusUnauthorized, "invalid signature_expiration %q", raw)
		}
		exp = &v
	}
	want := Signature(q.Get("path"), op, q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return statusf(http.StatusUnauthorized, "invalid signature")
	}
	if exp != nil && *exp < time.Now().Unix() {
		return statusf(http.StatusUnauthorized, "signature is already expired")
	}
	return nil
}
