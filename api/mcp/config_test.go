package mcp

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ config, want string }{
		{`{"github/acme/tools":{"runCmd":"npx tools","installCmd":"npm i","envs":{"KEY":"v"}}}`, ""},
		{`{"github/acme/a.b_c-d":{"runCmd":"x"}}`, ""},
		{`null`, "must be a JSON object"},
		{`{}`, "names no server"},
		{`{"duckduckgo":{}}`, `"duckduckgo": a server of Docker's MCP catalog`},
		{`{"github/acme":{"runCmd":"x"}}`, "not github/<owner>/<repo>"},
		{`{"github/acme/..":{"runCmd":"x"}}`, "not github/<owner>/<repo>"},
		{`{"github/-acme/tools":{"runCmd":"x"}}`, "not github/<owner>/<repo>"},
		{`{"github/acme/tools":{"runCmd":" "}}`, "runCmd is required"},
		{`{"github/acme/tools":{"runCmd":"x","image":"y"}}`, `unknown field "image"`},
		{`{"github/acme/tools":{"runCmd":"x","envs":{"1A":"v"}}}`, `"1A" is not a variable name`},
		{`{"github/acme/tools":{"runCmd":"` + strings.Repeat("x", maxCmd+1) + `"}}`, "at most 4096 bytes"},
	} {
		servers, err := Parse([]byte(tc.config))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.config, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%.60s: %v, want %q", tc.config, err, tc.want)
		case tc.want == "" && (len(servers) != 1 || servers[0].CloneURL() != "https://github.com/"+strings.TrimPrefix(servers[0].Key, "github/")):
			t.Errorf("%s: %+v", tc.config, servers)
		}
	}
}
