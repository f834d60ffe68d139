package e2b

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// notServed are the legacy template builds: 501, naming the SDK's build.
var notServed = map[string]string{
	"POST /templates":                               "legacy",
	"POST /v2/templates":                            "legacy",
	"POST /templates/{templateID}":                  "legacy",
	"POST /templates/{templateID}/builds/{buildID}": "legacy",
}

// notYet are team routes not built yet (none now): 404 "no route", as are
// the admin routes (E2B's operators', not a team's).
var notYet = []string{}

// TestEveryOpenAPIRoute: every method of every path of E2B's OpenAPI
// document (testdata) reaches the handler it names — whatever that
// answers an unknown ID — and none is shadowed by another route, a
// method answering 405 or the legacy build's 501; the routes not served
// say so with 404 "no route".
func TestEveryOpenAPIRoute(t *testing.T) {
	f := setup(t)
	t.Parallel()
	var spec struct {
		Paths map[string]map[string]struct {
			Tags []string `json:"tags"`
		} `json:"paths"`
	}
	b, err := os.ReadFile("testdata/e2b_openapi.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, ops := range spec.Paths {
		for method, op := range ops {
			if !slices.Contains([]string{"get", "post", "put", "patch", "delete"}, method) {
				continue
			}
			n++
			route := strings.ToUpper(method) + " " + path
			got := answer(f.api(t, strings.ToUpper(method), concrete(path), "{}"))
			want := "served"
			switch {
			case slices.Contains(op.Tags, "admin") || slices.Contains(notYet, path):
				want = "no route"
			case notServed[route] != "":
				want = notServed[route]
			}
			if got != want {
				t.Errorf("%s: %s, want %s", route, got, want)
			}
		}
	}
	if n < 60 {
		t.Fatalf("%d routes in the document, want its 60 and more", n)
	}
}

// concrete fills a path's parameters with well-formed values no object has.
func concrete(path string) string {
	return strings.NewReplacer("{sandboxID}", unknownID, "{templateID}", "no-such-template", "{buildID}", "no-such-build",
		"{hash}", strings.Repeat("a", 64), "{alias}", "no-such-alias", "{teamID}", testNS, "{nodeID}", "no-such-node",
		"{apiKeyID}", "no-such-key", "{accessTokenID}", "no-such-token", "{volumeID}", "no-such-volume",
		"{secretID}", "no-such-secret").Replace(path)
}

// answer classifies a reply: a route not served, a method refused, the
// legacy build's 501, or served (any other answer, a 404 for the
// unknown object among them).
func answer(r reply) string {
	var e apiError
	_ = json.Unmarshal(r.body, &e)
	switch {
	case r.code == http.StatusNotFound && strings.HasPrefix(e.Message, "no route"):
		return "no route"
	case r.code == http.StatusMethodNotAllowed:
		return "405"
	case r.code == http.StatusNotImplemented && strings.Contains(e.Message, "Template().build()"):
		return "legacy"
	}
	return "served"
}
