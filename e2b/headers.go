package e2b

import (
	"encoding/base64"
	"net/http"
	"strings"
)

// credentialHeaders prove who a client is to sandlot-api (or to a proxy in
// front of it). None is the sandbox's business, and a sandbox runs code
// nobody vouches for, which could replay them against the API. The
// sandbox's own X-Access-Token passes: envd checks it, and it opens only
// that sandbox. The traffic access token (E2B-Traffic-Access-Token) is
// this proxy's business only.
var credentialHeaders = []string{"X-Api-Key", "Cookie", "Proxy-Authorization", trafficTokenHeader}

// stripCredentials removes from a request bound for a sandbox the API's
// credentials and what tells about the client's network. Authorization
// is kept only in the one form envd reads, `Basic base64("<user>:")`
// (the SDKs name the guest user so), rebuilt without any password.
// X-Forwarded-*, Forwarded and X-Real-Ip (an ingress in front adds them)
// name the client's address and the proxies on the way: the sandbox needs
// neither, and the Host header already names the sandbox and port.
func stripCredentials(h http.Header) {
	for _, k := range credentialHeaders {
		h.Del(k)
	}
	if user := basicUser(h.Get("Authorization")); user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	} else {
		h.Del("Authorization")
	}
	for k := range h {
		if c := http.CanonicalHeaderKey(k); strings.HasPrefix(c, "X-Forwarded-") || c == "Forwarded" || c == "X-Real-Ip" {
			delete(h, k)
		}
	}
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
