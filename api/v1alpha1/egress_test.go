package v1alpha1

import (
	"strings"
	"testing"
)

func TestEgressRulesChecked(t *testing.T) {
	hdr := func(name, value string) []HeaderTransform { return []HeaderTransform{{Name: name, Value: value}} }
	ok := EgressRule{Domain: "api.example.com", Headers: hdr("Authorization", "Bearer ${e2b.secrets.openai}")}
	for name, c := range map[string]struct {
		n    SandboxNetwork
		want string // "" accepted
	}{
		"secret rule":       {SandboxNetwork{Rules: []EgressRule{ok}, SecretName: "s"}, ""},
		"literal value":     {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com", Headers: hdr("X-Team", "blue")}}}, ""},
		"no secretName":     {SandboxNetwork{Rules: []EgressRule{ok}}, "needs network.secretName"},
		"wildcard":          {SandboxNetwork{Rules: []EgressRule{{Domain: "*.example.com", Headers: hdr("X", "1")}}}, ""},
		"bare star":         {SandboxNetwork{Rules: []EgressRule{{Domain: "*", Headers: hdr("X", "1")}}}, "lower-case DNS name"},
		"ip":                {SandboxNetwork{Rules: []EgressRule{{Domain: "10.0.0.1", Headers: hdr("X", "1")}}}, "lower-case DNS name"},
		"twice":             {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com", Headers: hdr("X", "1")}, {Domain: "a.example.com", Headers: hdr("Y", "1")}}}, "one rule per domain"},
		"host header":       {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com", Headers: hdr("Host", "x")}}}, "proxy's own"},
		"pseudo header":     {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com", Headers: hdr(":authority", "x")}}}, "token characters"},
		"CRLF":              {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com", Headers: hdr("X", "a\r\nEvil: 1")}}}, "CR, LF or NUL"},
		"identity token":    {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com", Headers: hdr("X", "${e2b.identity.tokens.gh}")}}}, "not supported by sandlot"},
		"other placeholder": {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com", Headers: hdr("X", "${e2b.env.HOME}")}}}, "other than"},
		"long value":        {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com", Headers: hdr("X", strings.Repeat("v", 2049))}}}, "at most 2048"},
		"no headers":        {SandboxNetwork{Rules: []EgressRule{{Domain: "a.example.com"}}}, "0 headers"},
	} {
		_, err := ParseNetwork(&c.n)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error with %q", name, err, c.want)
		}
	}
	n := &SandboxNetwork{Rules: []EgressRule{ok, {Domain: "b.example.com", Headers: hdr("K", "${e2b.secrets.openai}${e2b.secrets.b}")}}}
	if got := strings.Join(n.SecretKeys(), ","); got != "openai,b" {
		t.Errorf("SecretKeys = %s", got)
	}
}
