package e2b

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// E2B's network.maskRequestHost: the Host header every request the proxy
// forwards into the sandbox carries, "${PORT}" replaced by the port it
// goes to (say "localhost:${PORT}", for a dev server that answers only
// its own name). Set at create (E2B's network update does not take it),
// kept as an annotation of the Sandbox: a concern of this proxy only.

// AnnotationMaskRequestHost is the mask as the create gave it.
const AnnotationMaskRequestHost = "e2b.sandlot.dev/mask-request-host"

// portPlaceholder is replaced by the request's port.
const portPlaceholder = "${PORT}"

type maskKey struct{}

// checkMask refuses a mask that is no host[:port] once its placeholder
// is filled (nil or "": no mask).
func checkMask(mask *string) *apiError {
	if mask == nil || *mask == "" {
		return nil
	}
	h := strings.ReplaceAll(*mask, portPlaceholder, "1")
	u, err := url.Parse("http://" + h)
	if len(*mask) > 255 || err != nil || u.Host != h || u.User != nil || u.Hostname() == "" ||
		strings.ContainsAny(h, " \t\r\n/?#@") {
		return errorf(http.StatusBadRequest, "field \"network.maskRequestHost\": %q is not a host[:port] (%s may stand for the port)", *mask, portPlaceholder)
	}
	return nil
}

// withMask carries sbx's mask for a request to port, if it has one.
func withMask(ctx context.Context, sbx *sandlotv1.Sandbox, port int) context.Context {
	m := sbx.Annotations[AnnotationMaskRequestHost]
	if m == "" {
		return ctx
	}
	return context.WithValue(ctx, maskKey{}, strings.ReplaceAll(m, portPlaceholder, strconv.Itoa(port)))
}
