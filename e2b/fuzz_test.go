package e2b

import (
	"strings"
	"testing"
)

// FuzzDecodeNewSandbox: decoding and validating any create body never
// panics, every refusal is a 4xx with a message, and what passes is within
// the bounds validate promises.
func FuzzDecodeNewSandbox(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `"base"`, `{"templateID":"base"}`,
		`{"templateID":"base","timeout":600,"autoPause":true,"autoResume":{"enabled":true},` +
			`"metadata":{"who":"me"},"envVars":{"A":"1"},"allow_internet_access":true,"mcp":null}`,
		`{"templateID":"base","timeout":-1}`, `{"templateID":"base","timeout":1e30}`, `{"templateID":"base","timeout":"ten"}`,
		`{"templateID":"base","envVars":{"1X":"v"}}`, `{"templateID":"base","metadata":{"":"v"}}`,
		`{"templateID":"base","autoResume":{"enabled":true}}`, `{"templateID":"base","volumeMounts":[{}]}`,
		`{"templateID":"base","mcp":{"x":1}}`, `{"templateID":"base","allow_internet_access":false}`,
		`{"templateID":`, `{} {}`, `{}}`, "{\"templateID\":\"\xff\"}", `{"metadata":{"a":1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var n newSandbox
		err := decodeJSON(data, &n)
		if err == nil {
			err = n.validate()
		}
		if err != nil {
			if err.Code < 400 || err.Code > 499 || err.Message == "" {
				t.Fatalf("%q: error %d %q, want a 4xx with a message", data, err.Code, err.Message)
			}
			return
		}
		if strings.TrimSpace(n.TemplateID) == "" || len(n.Metadata) > maxMetadata || len(n.EnvVars) > maxEnvVars ||
			(n.Timeout != nil && (*n.Timeout < 0 || *n.Timeout > maxTimeoutSeconds)) {
			t.Fatalf("%q passed as %+v", data, n)
		}
	})
}
