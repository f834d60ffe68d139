package e2b

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// E2B's network configuration maps onto Sandbox.spec.network (allowOut,
// denyOut, allow_internet_access, rules), enforced by the node on the
// VM's tap and by its egress proxy (egressrules.go), and
// allowPublicTraffic false onto a traffic access token this proxy
// requires; egressProxy onto spec.network.egressProxy (egressproxy.go).
// A request host mask is the proxy's (maskhost.go).

// AnnotationPrivateTraffic ("true"): the sandbox's ports other than
// envd's answer only requests that carry its traffic access token in
// E2B-Traffic-Access-Token (E2B's network.allowPublicTraffic false).
const AnnotationPrivateTraffic = "e2b.sandlot.dev/private-traffic"

// trafficTokenHeader is the header the SDKs send the token in.
const trafficTokenHeader = "E2b-Traffic-Access-Token"

// networkConfig is E2B's SandboxNetworkConfig (the create's network).
type networkConfig struct {
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	MaskRequestHost    *string         `json:"maskRequestHost,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
}

// networkUpdate is E2B's SandboxNetworkUpdateConfig (PUT .../network):
// it replaces the egress rules; an omitted field clears its rule.
type networkUpdate struct {
	AllowOut      []string        `json:"allowOut,omitempty"`
	DenyOut       []string        `json:"denyOut,omitempty"`
	EgressProxy   json.RawMessage `json:"egressProxy,omitempty"`
	Rules         json.RawMessage `json:"rules,omitempty"`
	AllowInternet *bool           `json:"allow_internet_access,omitempty"`
}

// networkJSON is SandboxNetworkConfig as the info route shows it.
type networkJSON struct {
	AllowPublicTraffic bool                  `json:"allowPublicTraffic"`
	AllowOut           []string              `json:"allowOut,omitempty"`
	DenyOut            []string              `json:"denyOut,omitempty"`
	MaskRequestHost    string                `json:"maskRequestHost,omitempty"`
	Rules              map[string][]ruleJSON `json:"rules,omitempty"`
	EgressProxy        *egressProxyInfo      `json:"egressProxy,omitempty"`
}

// setNonEmpty: a JSON value was sent that asks for something (not
// absent, null or {}).
func setNonEmpty(raw json.RawMessage) bool {
	v := string(bytes.TrimSpace(raw))
	return v != "" && v != "null" && v != "{}"
}

// specNetwork is spec.network of E2B's egress rules (nil: none), checked
// as the node's shim will check it; an error names the field (after
// prefix) and the entry.
func specNetwork(prefix string, allowOut, denyOut []string, allowInternet *bool, rawRules json.RawMessage,
	proxy *sandlotv1.EgressProxy) (*sandlotv1.SandboxNetwork, *apiError) {
	for field, list := range map[string][]string{"allowOut": allowOut, "denyOut": denyOut} {
		if len(list) > sandlotv1.MaxNetworkEntries {
			return nil, errorf(http.StatusBadRequest, "field %q: %d entries, at most %d", prefix+field, len(list), sandlotv1.MaxNetworkEntries)
		}
	}
	for _, e := range allowOut {
		if len(e) > 253 {
			return nil, errorf(http.StatusBadRequest, "field %q: entry %.40q... is longer than 253 characters", prefix+"allowOut", e)
		}
	}
	rules, aerr := specRules(prefix, rawRules)
	if aerr != nil {
		return nil, aerr
	}
	if len(allowOut) == 0 && len(denyOut) == 0 && allowInternet == nil && len(rules) == 0 && proxy == nil {
		return nil, nil
	}
	n := &sandlotv1.SandboxNetwork{AllowOut: allowOut, DenyOut: denyOut, AllowInternetAccess: allowInternet, Rules: rules,
		EgressProxy: proxy}
	if _, err := parseAccepted(n); err != nil {
		// ParseNetwork's lines read "network.<field>: <why>".
		var msgs []string
		for _, line := range strings.Split(err.Error(), "\n") {
			field, why, _ := strings.Cut(line, ": ")
			msgs = append(msgs, fmt.Sprintf("field %q: %s", prefix+strings.TrimPrefix(field, "network."), why))
		}
		return nil, errorf(http.StatusBadRequest, "%s", strings.Join(msgs, "; "))
	}
	return n, nil
}

// parseAccepted parses n as the node will once this API made the Secret
// its rules' placeholders name (secretName is set then).
func parseAccepted(n *sandlotv1.SandboxNetwork) (sandlotv1.NetworkRules, error) {
	if n == nil || n.SecretName != "" || len(n.SecretKeys()) == 0 {
		return sandlotv1.ParseNetwork(n)
	}
	check := *n
	check.SecretName = "pending"
	return sandlotv1.ParseNetwork(&check)
}

// platformRefusal refuses rules that ask to open what the platform
// denies to every sandbox (the chart's network.denyOut): the node would
// keep it closed, and a rule that silently does nothing is worse than a
// 400 that says why.
func (s *Server) platformRefusal(prefix string, n *sandlotv1.SandboxNetwork) *apiError {
	rules, err := parseAccepted(n)
	if err != nil { // specNetwork checked it
		return errorf(http.StatusBadRequest, "field %q: %v", prefix+"allowOut", err)
	}
	if err := s.cfg.Egress.Refusal(rules.AllowCIDRs); err != nil {
		return errorf(http.StatusBadRequest, "field %q: %v", prefix+"allowOut", err)
	}
	return nil
}

// network is the create's spec.network and whether its traffic is
// private (allowPublicTraffic false), or why the request is refused.
func (n *newSandbox) network() (*sandlotv1.SandboxNetwork, bool, *apiError) {
	cfg := n.Network
	if cfg == nil {
		cfg = &networkConfig{}
	}
	if err := checkMask(cfg.MaskRequestHost); err != nil {
		return nil, false, err
	}
	proxy, password, err := parseEgressProxy("network.", cfg.EgressProxy)
	if err != nil {
		return nil, false, err
	}
	spec, err := specNetwork("network.", cfg.AllowOut, cfg.DenyOut, n.AllowInternet, cfg.Rules, proxy)
	if err != nil {
		return nil, false, err
	}
	n.proxyPassword = password
	return spec, cfg.AllowPublicTraffic != nil && !*cfg.AllowPublicTraffic, nil
}

// networkPatch is the merge patch of spec.network that replaces its
// egress rules with next's: every rule field is written (null clears it);
// ingress, which E2B's update does not name, and secretName (the pod
// mounts it) are kept.
func networkPatch(cur, next *sandlotv1.SandboxNetwork) any {
	if next == nil && (cur == nil || !cur.Ingress && cur.SecretName == "") {
		return nil
	}
	p := map[string]any{"allowOut": nil, "denyOut": nil, "allowInternetAccess": nil, "rules": nil, "egressProxy": nil}
	if next != nil {
		if next.EgressProxy != nil {
			p["egressProxy"] = next.EgressProxy
		}
		if len(next.Rules) > 0 {
			p["rules"] = next.Rules
		}
		if len(next.AllowOut) > 0 {
			p["allowOut"] = next.AllowOut
		}
		if len(next.DenyOut) > 0 {
			p["denyOut"] = next.DenyOut
		}
		if next.AllowInternetAccess != nil {
			p["allowInternetAccess"] = *next.AllowInternetAccess
		}
	}
	return p
}

// networkApplyTimeout bounds how long an update of a running sandbox's
// rules waits for its node to enforce them.
const networkApplyTimeout = 30 * time.Second

// updateNetwork is PUT /sandboxes/{id}/network: the sandbox's egress
// rules are replaced, live on a running sandbox (answered once its node
// enforces them); a paused one gets them when it resumes. 204.
func (s *Server) updateNetwork(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body networkUpdate
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	proxy, password, err := parseEgressProxy("", body.EgressProxy)
	if err != nil {
		return 0, nil, err
	}
	next, err := specNetwork("", body.AllowOut, body.DenyOut, body.AllowInternet, body.Rules, proxy)
	if err != nil {
		return 0, nil, err
	}
	if err := s.platformRefusal("", next); err != nil {
		return 0, nil, err
	}
	if err := s.proxyRefusal(r.Context(), "", proxy); err != nil {
		return 0, nil, err
	}
	sbx, err := s.sandbox(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return 0, nil, err
	}
	if err := s.updateEgressSecret(r.Context(), sbx, next, password); err != nil {
		return 0, nil, err
	}
	if err := s.patchSpec(r.Context(), sbx, map[string]any{"network": networkPatch(sbx.Spec.Network, next)}); err != nil {
		return 0, nil, err
	}
	if err := s.waitNetworkApplied(r.Context(), sbx); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// waitNetworkApplied waits until the node enforces the spec.network of
// sbx's generation (its NetworkApplied condition), when sbx runs: new
// connections after the answer obey the new rules.
func (s *Server) waitNetworkApplied(ctx context.Context, sbx *sandlotv1.Sandbox) *apiError {
	if paused(sbx) || sbx.Status.Phase != sandlotv1.SandboxRunning {
		return nil
	}
	id, gen := sandlotv1.SandboxIDFor(sbx.UID), sbx.Generation
	what := fmt.Sprintf("the network rules of sandbox %s (set in its spec) applied by its node", id)
	return s.kube.waitFor(ctx, networkApplyTimeout, what, func() (bool, *apiError) {
		cur := &sandlotv1.Sandbox{}
		if err := s.kube.Get(ctx, client.ObjectKeyFromObject(sbx), cur); err != nil || cur.UID != sbx.UID {
			return false, errorf(http.StatusNotFound, "sandbox %q was deleted while its rules were applied", id)
		}
		if paused(cur) || cur.Status.Phase.Terminal() {
			return true, nil // no VM to apply them to: they apply when one starts
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, sandlotv1.ConditionNetworkApplied)
		if c == nil || c.ObservedGeneration < gen {
			return false, nil
		}
		if c.Reason == sandlotv1.ReasonInvalidNetwork {
			return false, errorf(http.StatusBadRequest, "network rules refused: %s", c.Message)
		}
		return c.Status == metav1.ConditionTrue, nil
	})
}

// privateTraffic: the sandbox's ports need its traffic access token.
func privateTraffic(sbx *sandlotv1.Sandbox) bool {
	return sbx.Annotations[AnnotationPrivateTraffic] == "true"
}

// trafficToken is the traffic access token of the sandbox whose envd
// token is envdToken ("" without one): derived, so nothing more is
// stored, and it does not reveal the envd token it is derived from.
func trafficToken(envdToken string) string {
	if envdToken == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(envdToken))
	m.Write([]byte("sandlot e2b traffic access token"))
	return hex.EncodeToString(m.Sum(nil))
}

// checkTraffic: a sandbox whose traffic is private answers on its ports
// (all but envd's, which its own token guards) only requests that carry
// its traffic access token.
func (s *Server) checkTraffic(r *http.Request, sbx *sandlotv1.Sandbox, port int) *apiError {
	if !privateTraffic(sbx) || port == sandlotv1.EnvdPort {
		return nil
	}
	want := trafficToken(s.token(r.Context(), sbx))
	if want == "" || !sameSecret(r.Header.Get(trafficTokenHeader), want) {
		return errorf(http.StatusUnauthorized, "invalid or missing E2B-Traffic-Access-Token for port %d of sandbox %q "+
			"(created with network.allowPublicTraffic false)", port, sandlotv1.SandboxIDFor(sbx.UID))
	}
	return nil
}

// networkOf is the network object of the info route.
func networkOf(sbx *sandlotv1.Sandbox) *networkJSON {
	out := &networkJSON{AllowPublicTraffic: !privateTraffic(sbx), MaskRequestHost: sbx.Annotations[AnnotationMaskRequestHost]}
	if n := sbx.Spec.Network; n != nil {
		out.AllowOut, out.DenyOut, out.Rules = n.AllowOut, n.DenyOut, rulesJSON(n.Rules)
		if p := n.EgressProxy; p != nil {
			out.EgressProxy = &egressProxyInfo{Address: p.Address, Username: p.Username}
		}
	}
	return out
}
