package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

func TestNetworkPatch(t *testing.T) {
	rules := &sandlotv1.SandboxNetwork{AllowOut: []string{"example.com"}, DenyOut: []string{"0.0.0.0/0"}, AllowInternetAccess: new(false)}
	tests := []struct {
		name      string
		cur, next *sandlotv1.SandboxNetwork
		want      string
	}{
		{"cleared", rules, nil, `null`},
		{"cleared, ingress kept", &sandlotv1.SandboxNetwork{Ingress: true, AllowOut: []string{"a.example"}}, nil,
			`{"allowInternetAccess":null,"allowOut":null,"denyOut":null,"egressProxy":null,"rules":null}`},
		{"replaced", &sandlotv1.SandboxNetwork{DenyOut: []string{"10.0.0.0/8"}}, rules,
			`{"allowInternetAccess":false,"allowOut":["example.com"],"denyOut":["0.0.0.0/0"],"egressProxy":null,"rules":null}`},
		{"partly omitted", rules, &sandlotv1.SandboxNetwork{AllowOut: []string{"b.example"}},
			`{"allowInternetAccess":null,"allowOut":["b.example"],"denyOut":null,"egressProxy":null,"rules":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(mustJSON(networkPatch(tc.cur, tc.next))); got != tc.want {
				t.Errorf("patch %s, want %s", got, tc.want)
			}
		})
	}
}

// TestValidateNetwork: the create's network is checked as the shim will
// check it, and what sandlot does not build is refused, naming the field.
func TestValidateNetwork(t *testing.T) {
	with := func(change func(*newSandbox)) newSandbox { n := newSandbox{TemplateID: "base"}; change(&n); return n }
	tests := []validateCase{
		{"network rules", with(func(n *newSandbox) {
			n.Network = &networkConfig{AllowOut: []string{"example.com", "*.example.org", "8.8.8.8", "1.1.1.0/24"}, DenyOut: []string{"0.0.0.0/0"},
				AllowPublicTraffic: new(false), Rules: []byte("{}"), EgressProxy: []byte("null"), MaskRequestHost: new("")}
		}), ""},
		{"bad allowOut entry", with(func(n *newSandbox) { n.Network = &networkConfig{AllowOut: []string{"example.com", "not a host"}} }),
			`field "network.allowOut": "not a host" is neither`},
		{"allowOut CIDR with host bits", with(func(n *newSandbox) { n.Network = &networkConfig{AllowOut: []string{"10.1.2.3/8"}} }),
			`field "network.allowOut": "10.1.2.3/8"`},
		{"domain in denyOut", with(func(n *newSandbox) { n.Network = &networkConfig{DenyOut: []string{"example.com"}} }),
			`field "network.denyOut": "example.com" is not an IPv4 address`},
		{"IPv6 in denyOut", with(func(n *newSandbox) { n.Network = &networkConfig{DenyOut: []string{"::/0"}} }), `field "network.denyOut": "::/0"`},
		{"too many allowOut", with(func(n *newSandbox) {
			n.Network = &networkConfig{AllowOut: slices.Repeat([]string{"example.com"}, sandlotv1.MaxNetworkEntries+1)}
		}), `field "network.allowOut": 257 entries`},
		{"long allowOut entry", with(func(n *newSandbox) { n.Network = &networkConfig{AllowOut: []string{strings.Repeat("a", 254)}} }),
			`field "network.allowOut": entry`},
		{"header rules", with(func(n *newSandbox) {
			n.Network = &networkConfig{Rules: []byte(`{"API.example.com":[{"transform":{"headers":{"X":"${e2b.secrets.Key}"}}}],"*.x.example":[{"transform":{"headers":{"Y":"1"}}}]}`)}
		}), ""},
		{"two rules for a domain", with(func(n *newSandbox) {
			n.Network = &networkConfig{Rules: []byte(`{"a.example":[{"transform":{"headers":{"X":"1"}}},{"transform":{"headers":{"X":"2"}}}]}`)}
		}), `field network.rules["a.example"]: one rule per domain`},
		{"CRLF in a header", with(func(n *newSandbox) {
			n.Network = &networkConfig{Rules: []byte(`{"a.example":[{"transform":{"headers":{"X":"1\r\nEvil: 1"}}}]}`)}
		}), `holds CR, LF or NUL`},
		{"egress proxy with a scheme", with(func(n *newSandbox) { n.Network = &networkConfig{EgressProxy: []byte(`{"address":"socks5://p:1080"}`)} }),
			`field "network.egressProxy.address": "socks5://p:1080" is not host:port`},
		{"egress proxy", with(func(n *newSandbox) {
			n.Network = &networkConfig{EgressProxy: []byte(`{"address":"proxy.example.com:1080","username":"u","password":"p"}`)}
		}), ""},
		{"egress proxy password without a user", with(func(n *newSandbox) {
			n.Network = &networkConfig{EgressProxy: []byte(`{"address":"proxy.example.com:1080","password":"p"}`)}
		}), `a password needs a username`},
		{"egress proxy field unknown", with(func(n *newSandbox) {
			n.Network = &networkConfig{EgressProxy: []byte(`{"address":"proxy.example.com:1080","type":"http"}`)}
		}), `unknown field "type"`},
		{"mask request host", with(func(n *newSandbox) { n.Network = &networkConfig{MaskRequestHost: new("${PORT}-x.example")} }), ""},
		{"mask request host with a port", with(func(n *newSandbox) { n.Network = &networkConfig{MaskRequestHost: new("localhost:${PORT}")} }), ""},
		{"mask request host with a path", with(func(n *newSandbox) { n.Network = &networkConfig{MaskRequestHost: new("a.example/x")} }),
			`field "network.maskRequestHost": "a.example/x" is not a host[:port]`},
		{"mask request host with a header", with(func(n *newSandbox) { n.Network = &networkConfig{MaskRequestHost: new("a.example\r\nX: y")} }),
			`field "network.maskRequestHost"`},
		{"mask request host with a user", with(func(n *newSandbox) { n.Network = &networkConfig{MaskRequestHost: new("u@a.example")} }),
			`field "network.maskRequestHost"`},
	}
	checkValidate(t, tests)
}

func TestSpecNetworkNamesTheField(t *testing.T) {
	if n, err := specNetwork("", nil, nil, nil, nil, nil); n != nil || err != nil {
		t.Errorf("no rules: %+v, %v; want nil", n, err)
	}
	_, err := specNetwork("", []string{"ok.example", "bad host"}, []string{"*.example.com"}, nil, nil, nil)
	if err == nil || err.Code != http.StatusBadRequest || !strings.Contains(err.Message, `field "allowOut": "bad host"`) ||
		!strings.Contains(err.Message, `field "denyOut": "*.example.com"`) {
		t.Errorf("got %v, want a 400 naming both fields and entries", err)
	}
}

func TestTrafficToken(t *testing.T) {
	a, b := trafficToken("tok-a"), trafficToken("tok-b")
	if a == "" || a == b || a != trafficToken("tok-a") || strings.Contains(a, "tok-a") || trafficToken("") != "" {
		t.Errorf("tokens %q, %q: want stable, distinct per sandbox, not the envd token, none without one", a, b)
	}
}

// createWith creates a sandbox through the API with body (metadata test
// is set to a mark), plays the controller until it is usable, and returns
// the Sandbox, its token and the answer.
func (f *fixture) createWith(t *testing.T, body map[string]any) (*sandlotv1.Sandbox, string, reply) {
	t.Helper()
	mark := randomID()
	body["metadata"] = map[string]string{"test": mark}
	ch := f.createAsync(t, f.url, body)
	sbx := f.created(t, mark)
	f.setRunning(t, sbx, newPodIP("127.0.0.1:1"))
	token := f.createToken(t, sbx)
	return sbx, token, receive(t, ch, 10*time.Second)
}

// TestCreateWithNetwork: the create's egress rules and
// allow_internet_access are spec.network; allowPublicTraffic false gives
// a traffic token; GET shows the rules.
func TestCreateWithNetwork(t *testing.T) {
	f := setup(t)
	t.Parallel()
	sbx, token, r := f.createWith(t, map[string]any{"templateID": "base", "allow_internet_access": false,
		"network": map[string]any{"allowOut": []string{"example.com", "8.8.8.8"}, "denyOut": []string{"10.0.0.0/8"}, "allowPublicTraffic": false}})
	want := &sandlotv1.SandboxNetwork{AllowOut: []string{"example.com", "8.8.8.8"}, DenyOut: []string{"10.0.0.0/8"}, AllowInternetAccess: new(false)}
	if !equality.Semantic.DeepEqual(sbx.Spec.Network, want) || sbx.Annotations[AnnotationPrivateTraffic] != "true" {
		t.Errorf("spec.network %+v, annotations %v; want %+v and private traffic", sbx.Spec.Network, sbx.Annotations, want)
	}
	got := decode[sandboxJSON](t, r, http.StatusCreated)
	if got.TrafficAccessToken == "" || got.TrafficAccessToken != trafficToken(token) {
		t.Errorf("create answered traffic token %q, want the sandbox's", got.TrafficAccessToken)
	}
	d := decode[sandboxDetail](t, f.api(t, "GET", "/sandboxes/"+got.SandboxID, nil), http.StatusOK)
	if d.Network == nil || d.Network.AllowPublicTraffic || !equality.Semantic.DeepEqual(d.Network.AllowOut, want.AllowOut) ||
		!equality.Semantic.DeepEqual(d.Network.DenyOut, want.DenyOut) || d.AllowInternetAccess == nil || *d.AllowInternetAccess {
		t.Errorf("GET network %+v, allowInternetAccess %v", d.Network, d.AllowInternetAccess)
	}

	plain, plainToken, r := f.createWith(t, map[string]any{"templateID": "base", "allow_internet_access": false})
	if n := plain.Spec.Network; n == nil || n.AllowInternetAccess == nil || *n.AllowInternetAccess || len(n.AllowOut)+len(n.DenyOut) > 0 {
		t.Errorf("allow_internet_access false alone: spec.network %+v", n)
	}
	// A public sandbox's traffic token gates none of its ports; the
	// code-interpreter SDK sends it on its context routes.
	if got := decode[sandboxJSON](t, r, http.StatusCreated); got.TrafficAccessToken != trafficToken(plainToken) {
		t.Errorf("a public sandbox got traffic token %q, want its own", got.TrafficAccessToken)
	}
	d = decode[sandboxDetail](t, f.api(t, "GET", "/sandboxes/"+sandlotv1.SandboxIDFor(plain.UID), nil), http.StatusOK)
	if d.Network == nil || !d.Network.AllowPublicTraffic || d.AllowInternetAccess == nil || *d.AllowInternetAccess {
		t.Errorf("GET network %+v, allowInternetAccess %v", d.Network, d.AllowInternetAccess)
	}
	var listed []map[string]any
	if err := json.Unmarshal(f.api(t, "GET", "/v2/sandboxes", nil).body, &listed); err != nil || len(listed) == 0 {
		t.Fatalf("list: %v", err)
	}
	if _, ok := listed[0]["network"]; ok {
		t.Errorf("a ListedSandbox has no network: %v", listed[0])
	}
}

// TestNetworkRefused: bad entries and what sandlot does not build are
// 400s naming the field; nothing is created.
func TestNetworkRefused(t *testing.T) {
	f := setup(t)
	t.Parallel()
	sbx := f.makeSandbox(t, nil)
	put := "/sandboxes/" + sandlotv1.SandboxIDFor(sbx.UID) + "/network"
	tests := []struct {
		name, method, path string
		body               any
		msg                string
	}{
		{"create: bad allowOut", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"allowOut":["exa mple.com"]}}`,
			`field "network.allowOut": "exa mple.com"`},
		{"create: domain in denyOut", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"denyOut":["example.com"]}}`,
			`field "network.denyOut": "example.com"`},
		{"create: rule for an IP", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"rules":{"10.0.0.1":[{"transform":{"headers":{"A":"b"}}}]}}}`,
			`field "network.rules[10.0.0.1]": the domain must be a lower-case DNS name`},
		{"create: unknown secret", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"rules":{"x.example":[{"transform":{"headers":{"A":"${e2b.secrets.nope}"}}}]}}}`,
			`secret "nope" (${e2b.secrets.nope}) not found`},
		{"create: Host header", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"rules":{"x.example":[{"transform":{"headers":{"Host":"b"}}}]}}}`,
			`header "Host" is the proxy's own`},
		{"create: egressProxy that does not resolve", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"egressProxy":{"address":"nowhere.invalid:1080"}}}`,
			`field "network.egressProxy.address": nowhere.invalid does not resolve`},
		{"create: maskRequestHost", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"maskRequestHost":"x y"}}`,
			`field "network.maskRequestHost"`},
		{"create: allowOut not a list", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"allowOut":"example.com"}}`,
			`field "network.allowOut"`},
		{"update: bad denyOut", "PUT", put, `{"denyOut":["10.0.0.1/8"]}`, `field "denyOut": "10.0.0.1/8" has host bits set`},
		{"update: empty rule", "PUT", put, `{"rules":{"x.example":[]}}`, `field rules["x.example"]: one rule per domain, with transform.headers`},
		{"update: secret rules on a sandbox made without", "PUT", put, `{"rules":{"x.example":[{"transform":{"headers":{"A":"${e2b.secrets.s}"}}}]}}`,
			`secrets need a sandbox created with a secret rule or a proxy password`},
		{"update: egressProxy that does not resolve", "PUT", put, `{"egressProxy":{"address":"nowhere.invalid:1080"}}`, `field "egressProxy.address": nowhere.invalid does not resolve`},
		{"update: egressProxy password on a sandbox made without", "PUT", put, `{"egressProxy":{"address":"192.0.2.1:1080","username":"u","password":"p"}}`,
			`need a sandbox created with a secret rule or a proxy password`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.api(t, tc.method, tc.path, tc.body).wantError(t, http.StatusBadRequest, tc.msg)
		})
	}
	f.api(t, "PUT", "/sandboxes/"+unknownID+"/network", `{}`).wantError(t, http.StatusNotFound, "not found")
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil || sbx.Spec.Network != nil {
		t.Errorf("refused updates changed spec.network: %+v (%v)", sbx.Spec.Network, err)
	}
}

// TestUpdateNetwork: PUT .../network replaces the egress rules (an
// omitted field clears its rule, ingress stays), on a paused sandbox too;
// GET shows them at once.
func TestUpdateNetwork(t *testing.T) {
	f := setup(t)
	t.Parallel()
	sbx := f.makeSandbox(t, func(s *sandlotv1.Sandbox) {
		s.Spec.Paused = true
		s.Spec.Network = &sandlotv1.SandboxNetwork{AllowOut: []string{"old.example"}, DenyOut: []string{"1.2.3.4"}, Ingress: true}
	})
	id := sandlotv1.SandboxIDFor(sbx.UID)
	steps := []struct {
		body string
		want *sandlotv1.SandboxNetwork
	}{
		{`{"allowOut":["new.example","*.new.example"],"allow_internet_access":false}`,
			&sandlotv1.SandboxNetwork{AllowOut: []string{"new.example", "*.new.example"}, AllowInternetAccess: new(false), Ingress: true}},
		{`{"denyOut":["10.0.0.0/8"]}`, &sandlotv1.SandboxNetwork{DenyOut: []string{"10.0.0.0/8"}, Ingress: true}},
		{`{}`, &sandlotv1.SandboxNetwork{Ingress: true}},
	}
	for i, st := range steps {
		if r := f.api(t, "PUT", "/sandboxes/"+id+"/network", st.body); r.code != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("step %d: PUT %s: %d %s, want 204", i, st.body, r.code, r.body)
		}
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(sbx.Spec.Network, st.want) {
			t.Errorf("step %d: spec.network %+v, want %+v", i, sbx.Spec.Network, st.want)
		}
		d := decode[sandboxDetail](t, f.api(t, "GET", "/sandboxes/"+id, nil), http.StatusOK)
		if d.Network == nil || !equality.Semantic.DeepEqual(d.Network.AllowOut, st.want.AllowOut) ||
			!equality.Semantic.DeepEqual(d.Network.DenyOut, st.want.DenyOut) {
			t.Errorf("step %d: GET shows %+v", i, d.Network)
		}
	}
	other := f.makeSandbox(t, func(s *sandlotv1.Sandbox) {
		s.Spec.Network = &sandlotv1.SandboxNetwork{AllowOut: []string{"x.example"}}
	})
	if r := f.api(t, "PUT", "/sandboxes/"+sandlotv1.SandboxIDFor(other.UID)+"/network", `{}`); r.code != http.StatusNoContent {
		t.Fatalf("PUT {}: %d %s", r.code, r.body)
	}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(other), other); err != nil || other.Spec.Network != nil {
		t.Errorf("PUT {} left spec.network %+v (%v), want none", other.Spec.Network, err)
	}
}

// TestUpdateNetworkWaitsForTheNode: on a running sandbox the update is
// answered once the node enforces the new rules (NetworkApplied at the
// spec's generation), not before.
func TestUpdateNetworkWaitsForTheNode(t *testing.T) {
	f := setup(t)
	t.Parallel()
	pod := newTestPod(t)
	id, _ := f.readySandbox(t, pod.Listener.Addr().String(), nil)
	ch := make(chan reply, 1)
	go func() {
		r, err := send(f.url, "PUT", "/sandboxes/"+id+"/network", `{"allowOut":["example.com"],"allow_internet_access":false}`, "X-API-KEY", f.key)
		if err != nil {
			t.Errorf("PUT: %v", err)
		}
		ch <- r
	}()
	sbx, _ := f.srv.sandbox(context.Background(), id, false)
	poll.Eventually(t, 10*time.Second, "spec.network set", func() error {
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil || sbx.Spec.Network == nil {
			return fmt.Errorf("spec.network %+v (%v)", sbx.Spec.Network, err)
		}
		return nil
	})
	applied := func(gen int64) { // plays the controller, once the agent applied the rules
		t.Helper()
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
			t.Fatal(err)
		}
		meta.SetStatusCondition(&sbx.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionNetworkApplied,
			Status: metav1.ConditionTrue, Reason: sandlotv1.ReasonNetworkApplied, Message: "m", ObservedGeneration: gen})
		if err := f.c.Status().Update(context.Background(), sbx); err != nil {
			t.Fatal(err)
		}
	}
	applied(sbx.Generation - 1)
	pending(t, ch, 300*time.Millisecond, "the node applied the new rules")
	applied(sbx.Generation)
	if r := receive(t, ch, 10*time.Second); r.code != http.StatusNoContent {
		t.Fatalf("PUT: %d %s, want 204", r.code, r.body)
	}
}

// TestPrivateTraffic: a sandbox created with allowPublicTraffic false
// answers on its ports only with its traffic token, which the sandbox
// never sees; envd's port keeps its own token.
func TestPrivateTraffic(t *testing.T) {
	f := setup(t)
	t.Parallel()
	up := headerEcho(t)
	id, token := f.readySandbox(t, up.Listener.Addr().String(), func(s *sandlotv1.Sandbox) {
		s.Annotations = map[string]string{AnnotationPrivateTraffic: "true"}
	})
	host := func(port int) string { return fmt.Sprintf("%d-%s.%s", port, id, testDomain) }
	call(t, f.url, "GET", "/", nil, "Host", host(8080)).wantError(t, http.StatusUnauthorized, "E2B-Traffic-Access-Token")
	call(t, f.url, "GET", "/", nil, "Host", host(8080), "E2B-Traffic-Access-Token", token).
		wantError(t, http.StatusUnauthorized, "network.allowPublicTraffic false")
	r := call(t, f.url, "GET", "/", nil, "Host", host(8080), "E2B-Traffic-Access-Token", trafficToken(token))
	var got http.Header
	if r.code != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("with the traffic token: %d %s", r.code, r.body)
	}
	if v := got.Get(trafficTokenHeader); v != "" {
		t.Errorf("the sandbox got the traffic token %q", v)
	}
	if r := call(t, f.url, "GET", "/health", nil, "Host", host(sandlotv1.EnvdPort), "X-Access-Token", token); r.code != http.StatusOK {
		t.Errorf("envd with its token: %d %s", r.code, r.body)
	}
}

// TestForkInheritsNetwork: a fork's child has its parent's rules and
// private traffic (and its own traffic token).
func TestForkInheritsNetwork(t *testing.T) {
	f := setup(t)
	t.Parallel()
	rules := &sandlotv1.SandboxNetwork{AllowOut: []string{"example.com"}, DenyOut: []string{"0.0.0.0/0"}, Ingress: true}
	pod := newTestPod(t)
	id, _ := f.readySandbox(t, pod.Listener.Addr().String(), func(s *sandlotv1.Sandbox) {
		s.Annotations = map[string]string{AnnotationPrivateTraffic: "true"}
		s.Spec.Network = rules
	})
	ch := make(chan reply, 1)
	go func() {
		r, err := send(f.url, "POST", "/sandboxes/"+id+"/fork", `{"count":1}`, "X-API-KEY", f.key)
		if err != nil {
			t.Errorf("fork: %v", err)
		}
		ch <- r
	}()
	snap := f.forkSnapshotReady(t, id)
	var child *sandlotv1.Sandbox
	poll.Eventually(t, 10*time.Second, "the fork's child", func() error {
		list := &sandlotv1.SandboxList{}
		if err := f.c.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
			return err
		}
		for i := range list.Items {
			if list.Items[i].Spec.Source.Snapshot == snap {
				child = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no sandbox of snapshot %s", snap)
	})
	if !equality.Semantic.DeepEqual(child.Spec.Network, rules) || !privateTraffic(child) {
		t.Errorf("child spec.network %+v, annotations %v; want the parent's", child.Spec.Network, child.Annotations)
	}
	f.setRunning(t, child, newPodIP("127.0.0.1:1"))
	token := f.createToken(t, child)
	res := decode[[]forkResult](t, receive(t, ch, 10*time.Second), http.StatusCreated)
	if len(res) != 1 || res[0].Sandbox == nil || res[0].Sandbox.TrafficAccessToken != trafficToken(token) {
		t.Errorf("fork answered %+v", res)
	}
}

// forkSnapshotReady plays the node agent for the snapshot a fork of the
// sandbox id takes, and returns its name.
func (f *fixture) forkSnapshotReady(t *testing.T, id string) string {
	t.Helper()
	var name string
	poll.Eventually(t, 10*time.Second, "the fork's snapshot Ready", func() error {
		list := &sandlotv1.SnapshotList{}
		if err := f.c.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
			return err
		}
		for i := range list.Items {
			snap := &list.Items[i]
			parent, err := f.srv.sandbox(context.Background(), id, false)
			if err != nil || snap.Spec.Source.Sandbox != parent.Name || !strings.HasPrefix(snap.Name, "fork-") {
				continue
			}
			snap.Status.Phase, snap.Status.NodeName = sandlotv1.DataReady, "n1"
			snap.Status.RemoteStatus, snap.Status.Location = sandlotv1.RemoteNotApplicable, "store://"+snap.Name
			name = snap.Name
			return f.c.Status().Update(context.Background(), snap)
		}
		return fmt.Errorf("no fork snapshot of %s among %d", id, len(list.Items))
	})
	return name
}

func TestSpecRulesNormalized(t *testing.T) {
	rules, err := specRules("network.", []byte(`{"API.Example.com.":[{"transform":{"headers":{"b":"2","A":"Bearer ${e2b.secrets.OpenAI}"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []sandlotv1.EgressRule{{Domain: "api.example.com", Headers: []sandlotv1.HeaderTransform{
		{Name: "A", Value: "Bearer ${e2b.secrets.openai}"}, {Name: "b", Value: "2"}}}}
	if !reflect.DeepEqual(rules, want) {
		t.Fatalf("specRules = %+v", rules)
	}
	back := string(mustJSON(rulesJSON(rules)))
	if back != `{"api.example.com":[{"transform":{"headers":{"A":"Bearer ${e2b.secrets.openai}","b":"2"}}}]}` {
		t.Fatalf("rulesJSON = %s", back)
	}
}
