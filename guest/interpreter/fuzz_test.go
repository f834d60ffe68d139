package interpreter

import (
	"strings"
	"testing"
)

func FuzzExecuteRequest(f *testing.F) {
	for _, s := range []string{
		`{"code":"1+1"}`,
		`{"code":"x","context_id":"abc","env_vars":{"A":"1"}}`,
		`{"code":"x","language":"python","env_vars":null}`,
		`{"code":null}`, `{"code":1}`, `[]`, `{`, ``, `{"code":"a"} {}`,
		`{"code":"a","env_vars":{"":"x"}}`, `{"code":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeExecuteRequest(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if req.Code == nil {
			t.Fatal("accepted a request without code")
		}
		if req.ContextID != "" && req.Language != "" {
			t.Fatal("accepted both context_id and language")
		}
		for k, v := range req.EnvVars {
			if checkEnvVar(k, v) != nil {
				t.Fatalf("accepted bad env var %q", k)
			}
		}
		_, _ = normalizeLanguage(req.Language)
		_, _ = decodeCreateContext(strings.NewReader(string(data)))
	})
}
