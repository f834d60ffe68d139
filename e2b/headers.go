package e2b

import (
	"encoding/base64"
	"net/http"
	"strings"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// credentialHeaders prove who a client is to sandlot-api (or to a proxy in
// front of it). None is the sandbox's business, and a sandbox runs code
// nobody vouches for, which could replay them against the API. The
// sandbox's own X-Access-Token passes: envd checks it, and it opens only
// that sandbox. The traffic access token (E2B-Traffic-Access-Token) is
// this proxy's business only.
var credentialHeaders = []string{"X-Api-Key", "Cookie", "Proxy-Authorization", trafficTokenHeader}

// stripCredentials removes from a request bound for port of a sandbox
// the API's credentials and what tells about the client's network.
// On envd's and the interpreter's ports, Authorization is kept only in
// the one form envd reads, `Basic base64("<user>:")` (the SDKs name the
// guest user so), rebuilt without any password. On the sandbox's own
// ports it is the sandbox's service's (an MCP gateway's token, a web
// app's login) and passes, unless it carries an API key or an access
// token. X-Forwarded-*, Forwarded and X-Real-Ip (an ingress in front
// adds them) name the client's address and the proxies on the way: the
// sandbox needs neither, and the Host header already names the sandbox
// and port.
func stripCredentials(h http.Header, port int) {
	for _, k := range credentialHeaders {
		h.Del(k)
	}
	auth := h.Get("Authorization")
	switch user := basicUser(auth); {
	case !agentPort(port) && !carriesCredential(auth):
		// the sandbox's service's own: it passes as sent
	case user != "":
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	default:
		h.Del("Authorization")
	}
	for k := range h {
		if c := http.CanonicalHeaderKey(k); strings.HasPrefix(c, "X-Forwarded-") || c == "Forwarded" || c == "X-Real-Ip" {
			delete(h, k)
		}
	}
}

// agentPort: the guest agent's ports (envd, the code interpreter), which
// need the sandbox's token; the sandbox's own services answer the others.
func agentPort(port int) bool {
	return port == sandlotv1.EnvdPort || port == sandlotv1.CodeInterpreterPort
}

// carriesCredential: an Authorization value holding something of the
// API's form (an API key e2b_…, an access token sk_e2b_…) anywhere: as
// a bearer token, inside a Basic pair, in another scheme.
func carriesCredential(auth string) bool {
	_, value, _ := strings.Cut(auth, " ")
	if raw, err := base64.StdEncoding.DecodeString(value); err == nil && strings.HasPrefix(auth, "Basic ") {
		value = string(raw)
	}
	return strings.Contains(value, apiKeyPrefix)
}

// basicUser is the user name of a Basic Authorization value as envd
// parses it ("" for anything else: a bearer token, no user, not base64).
func basicUser(auth string) string {
	enc, ok := strings.CutPrefix(auth, "Basic ")
	if !ok {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	user, _, _ := strings.Cut(string(raw), ":")
	return user
}
