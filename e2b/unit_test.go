package e2b

import (
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/envd"
)

// item is a list entry for paginate: a time in seconds and an ID.
type item struct {
	at int64
	id string
}

func itemKey(it *item) pageKey { return pageKey{time.Unix(it.at, 0), it.id} }

func items(s string) []item { // "1a 1b 2a" → {1,a} {1,b} {2,a}
	var out []item
	for f := range strings.FieldsSeq(s) {
		out = append(out, item{int64(f[0] - '0'), f[1:]})
	}
	return out
}

func itemsString(its []item) string {
	var b []string
	for _, it := range its {
		b = append(b, fmt.Sprint(it.at, it.id))
	}
	return strings.Join(b, " ")
}

func TestPaginate(t *testing.T) {
	tokenOf := func(s string) string { return itemKey(&items(s)[0]).token() }
	b64 := base64.RawURLEncoding.EncodeToString
	tests := []struct {
		name, items, token string
		limit              int
		want, wantNext     string // wantNext: the token of that item
		wantErr            bool
	}{
		{name: "empty", limit: 2},
		{name: "fits", items: "1a 2a", limit: 2, want: "1a 2a"},
		{name: "sorted by time, then ID", items: "2a 1c 1b 3a", limit: 10, want: "1b 1c 2a 3a"},
		{name: "first page", items: "3a 1a 2a 2b 1b", limit: 2, want: "1a 1b", wantNext: "1b"},
		{name: "middle page", items: "3a 1a 2a 2b 1b", limit: 2, token: tokenOf("1b"), want: "2a 2b", wantNext: "2b"},
		{name: "last page", items: "3a 1a 2a 2b 1b", limit: 2, token: tokenOf("2b"), want: "3a"},
		{name: "after an item now gone", items: "1a 2a 3a", limit: 5, token: tokenOf("2"), want: "2a 3a"},
		{name: "past the end", items: "1a 2a", limit: 2, token: tokenOf("9z")},
		{name: "token not base64", items: "1a", limit: 2, token: "!!", wantErr: true},
		{name: "token without a dot", items: "1a", limit: 2, token: b64([]byte("123")), wantErr: true},
		{name: "token without a number", items: "1a", limit: 2, token: b64([]byte("x.a")), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			page, next, err := paginate(items(tc.items), tc.token, tc.limit, itemKey)
			if tc.wantErr {
				if err == nil || err.Code != http.StatusBadRequest || !strings.Contains(err.Message, "nextToken") {
					t.Fatalf("got %v, want a 400 about nextToken", err)
				}
				return
			}
			wantNext := ""
			if tc.wantNext != "" {
				wantNext = tokenOf(tc.wantNext)
			}
			if err != nil || itemsString(page) != itemsString(items(tc.want)) || next != wantNext {
				t.Errorf("got %q next %q (%v), want %q next %q", itemsString(page), next, err, tc.want, wantNext)
			}
		})
	}
	t.Run("walk", func(t *testing.T) {
		all := items("5e 1a 4a 1b 3a 2a 1c 2b")
		var got []item
		token := ""
		for range len(all) {
			page, next, err := paginate(all, token, 3, itemKey)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page...)
			if token = next; next == "" {
				break
			}
		}
		if want := "1a 1b 1c 2a 2b 3a 4a 5e"; itemsString(got) != want {
			t.Errorf("walked %q, want %q", itemsString(got), want)
		}
	})
	t.Run("walk newest first", func(t *testing.T) {
		all := items("5e 1a 4a 1b 3a 2a 1c 2b")
		var got []item
		token := ""
		for range len(all) {
			page, next, err := paginateOrdered(all, token, 3, itemKey, true)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page...)
			if token = next; next == "" {
				break
			}
		}
		if want := "5e 4a 3a 2b 2a 1c 1b 1a"; itemsString(got) != want {
			t.Errorf("walked %q, want %q", itemsString(got), want)
		}
	})
}

func TestParseMetadataQuery(t *testing.T) {
	tests := []struct {
		name, q string
		want    map[string]string
		wantErr bool
	}{
		{name: "none"},
		{name: "one pair", q: "who=me", want: map[string]string{"who": "me"}},
		{name: "pairs", q: "who=me&n=1", want: map[string]string{"who": "me", "n": "1"}},
		{name: "SDK-encoded", q: sdkMetadata(map[string]string{"team name": "a&b=c/d%+é"}),
			want: map[string]string{"team name": "a&b=c/d%+é"}},
		{name: "the last of a repeated key", q: "a=1&a=2", want: map[string]string{"a": "2"}},
		{name: "empty value", q: "a=", want: map[string]string{"a": ""}},
		{name: "empty key", q: "=v", wantErr: true},
		{name: "bad escape", q: "a=%zz", wantErr: true},
		{name: "bad escape once decoded", q: "a%25zz=1", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMetadataQuery(tc.q)
			if tc.wantErr {
				if err == nil || err.Code != http.StatusBadRequest || !strings.Contains(err.Message, `query "metadata"`) {
					t.Errorf("got %v, %v; want a 400", got, err)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	// The SDK's query, as the brief's example spells it on the wire.
	if got := (url.Values{"metadata": {sdkMetadata(map[string]string{"who": "me", "n": "1"})}}).Encode(); got != "metadata=n%3D1%26who%3Dme" {
		t.Errorf("sdkMetadata on the wire: %s", got)
	}
}

func TestProxyTarget(t *testing.T) {
	const id = "abcdefghij0123456789"
	tests := []struct {
		name, domain, host string
		hdr                map[string]string
		want               target
		ok                 bool
	}{
		{name: "headers", hdr: map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999"}, want: target{id, 49999}, ok: true},
		{name: "headers, no port: envd", hdr: map[string]string{"E2b-Sandbox-Id": id}, want: target{id, sandlotv1.EnvdPort}, ok: true},
		{name: "headers, bad port: envd", hdr: map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "x"}, want: target{id, sandlotv1.EnvdPort}, ok: true},
		{name: "headers win over the host", domain: "sb.test", host: "8080-" + id + ".sb.test", hdr: map[string]string{"E2b-Sandbox-Id": id}, want: target{id, sandlotv1.EnvdPort}, ok: true},
		{name: "host in the domain", domain: "sb.test", host: "8080-" + id + ".sb.test", want: target{id, 8080}, ok: true},
		{name: "host and domain with ports", domain: "sb.test:8443", host: "49983-" + id + ".sb.test:8443", want: target{id, 49983}, ok: true},
		{name: "any domain when none is set", host: "3000-" + id + ".anything.example", want: target{id, 3000}, ok: true},
		{name: "host in another domain", domain: "sb.test", host: "8080-" + id + ".other.test"},
		{name: "a subdomain is not the domain", domain: "sb.test", host: "8080-" + id + ".x.sb.test"},
		{name: "API host", domain: "sb.test", host: "api.sb.test"},
		{name: "localhost", host: "localhost:3000"},
		{name: "no domain part", host: "8080-" + id},
		{name: "short ID", domain: "sb.test", host: "8080-abc.sb.test"},
		{name: "upper-case ID", domain: "sb.test", host: "8080-" + strings.ToUpper(id) + ".sb.test"},
		{name: "port too long", domain: "sb.test", host: "123456-" + id + ".sb.test"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{cfg: Config{Domain: tc.domain}}
			r := &http.Request{Host: tc.host, Header: http.Header{}}
			for k, v := range tc.hdr {
				r.Header.Set(k, v)
			}
			if got, ok := s.proxyTarget(r); got != tc.want || ok != tc.ok {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestTimeoutFromNow(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	tests := []struct {
		name           string
		created        time.Duration // ago
		resumed        *time.Duration
		secs, want     int64
		wantAtLeastOne bool
	}{
		{name: "just created", secs: 60, want: 60},
		{name: "created 10s ago", created: 10 * time.Second, secs: 60, want: 70},
		{name: "elapsed rounds up", created: 10*time.Second + 200*time.Millisecond, secs: 60, want: 71},
		{name: "counts from the last resume", created: time.Hour, resumed: new(5 * time.Second), secs: 60, want: 65},
		{name: "zero is at least one second", secs: 0, want: 1},
		{name: "zero after a while is now", created: 30 * time.Second, secs: 0, want: 30},
		{name: "capped at the CRD's maximum", created: 29 * 24 * time.Hour, secs: 2 * 24 * 3600, want: maxTimeoutSeconds},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{now: func() time.Time { return now }}
			sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: ago(tc.created)}}
			if tc.resumed != nil {
				at := ago(*tc.resumed)
				sbx.Status.LastResumedAt = &at
			}
			if got := s.timeoutFromNow(sbx, tc.secs); got != tc.want {
				t.Errorf("timeoutFromNow(%d) = %d, want %d", tc.secs, got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	many := func(n int, key func(int) string, val string) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[key(i)] = val
		}
		return m
	}
	envKey := func(i int) string { return fmt.Sprint("V", i) }
	ok := newSandbox{TemplateID: "base"}
	with := func(change func(*newSandbox)) newSandbox { n := ok; change(&n); return n }
	tests := []validateCase{
		{"minimal", ok, ""},
		{"full", with(func(n *newSandbox) {
			n.Timeout, n.AutoPause, n.AutoResume = new(int64(maxTimeoutSeconds)), new(true), &autoResume{Enabled: true}
			n.Metadata, n.EnvVars = many(maxMetadata, envKey, "v"), many(maxEnvVars, envKey, strings.Repeat("x", maxEnvValue))
			n.AllowInternet, n.Mcp = new(true), []byte("null")
		}), ""},
		{"no templateID", newSandbox{}, `"templateID" is required`},
		{"blank templateID", newSandbox{TemplateID: " \t"}, `"templateID" is required`},
		{"negative timeout", with(func(n *newSandbox) { n.Timeout = new(int64(-1)) }), `"timeout": -1`},
		{"timeout too long", with(func(n *newSandbox) { n.Timeout = new(int64(maxTimeoutSeconds + 1)) }), `"timeout"`},
		{"too much metadata", with(func(n *newSandbox) { n.Metadata = many(maxMetadata+1, envKey, "v") }), `"metadata": 65 entries`},
		{"empty metadata key", with(func(n *newSandbox) { n.Metadata = map[string]string{"": "v"} }), `"metadata": key ""`},
		{"long metadata key", with(func(n *newSandbox) { n.Metadata = map[string]string{strings.Repeat("k", maxMetadataKey+1): "v"} }), `"metadata": key`},
		{"long metadata value", with(func(n *newSandbox) { n.Metadata = map[string]string{"k": strings.Repeat("v", maxMetadataValue+1)} }), `the value of "k"`},
		{"too many env vars", with(func(n *newSandbox) { n.EnvVars = many(maxEnvVars+1, envKey, "v") }), `"envVars": 257 variables`},
		{"env name with a dash", with(func(n *newSandbox) { n.EnvVars = map[string]string{"A-B": "v"} }), `"A-B" is not a valid`},
		{"env name with a digit first", with(func(n *newSandbox) { n.EnvVars = map[string]string{"1A": "v"} }), `"1A" is not a valid`},
		{"long env value", with(func(n *newSandbox) { n.EnvVars = map[string]string{"A": strings.Repeat("x", maxEnvValue+1)} }), "the value of A"},
		{"autoResume without autoPause", with(func(n *newSandbox) { n.AutoResume = &autoResume{Enabled: true} }), `"autoResume": needs autoPause`},
		{"autoResume with autoPause false", with(func(n *newSandbox) { n.AutoResume, n.AutoPause = &autoResume{Enabled: true}, new(false) }), `"autoResume"`},
		{"autoResume disabled", with(func(n *newSandbox) { n.AutoResume = &autoResume{} }), ""},
		{"volume mount", with(func(n *newSandbox) { n.VolumeMounts = []sandlotv1.VolumeMount{{Name: "data", Path: "/mnt/data"}} }), ""},
		{"volume mount without a name", with(func(n *newSandbox) { n.VolumeMounts = []sandlotv1.VolumeMount{{Path: "/mnt/data"}} }), `"volumeMounts": name ""`},
		{"volume mount at /", with(func(n *newSandbox) { n.VolumeMounts = []sandlotv1.VolumeMount{{Name: "d", Path: "/"}} }), `path "/"`},
		{"volume mount relative", with(func(n *newSandbox) { n.VolumeMounts = []sandlotv1.VolumeMount{{Name: "d", Path: "mnt"}} }), `path "mnt"`},
		{"volume mount with ..", with(func(n *newSandbox) { n.VolumeMounts = []sandlotv1.VolumeMount{{Name: "d", Path: "/mnt/../etc"}} }), `path "/mnt/../etc"`},
		{"volume mounts on one path", with(func(n *newSandbox) {
			n.VolumeMounts = []sandlotv1.VolumeMount{{Name: "a", Path: "/m"}, {Name: "b", Path: "/m"}}
		}), `path "/m" twice`},
		{"mcp catalog server", with(func(n *newSandbox) { n.Mcp = []byte(`{"duckduckgo":{}}`) }), `"mcp": MCP server "duckduckgo": a server of Docker's MCP catalog`},
		{"mcp not an object", with(func(n *newSandbox) { n.Mcp = []byte(`[1]`) }), `"mcp": the MCP configuration must be a JSON object`},
		{"mcp github server", with(func(n *newSandbox) { n.Mcp = []byte(`{"github/acme/tools":{"runCmd":"npx tools"}}`) }), ""},
		{"no internet", with(func(n *newSandbox) { n.AllowInternet = new(false) }), ""},
	}
	checkValidate(t, tests)
}

func TestDecodeJSON(t *testing.T) {
	tests := []struct{ body, msg string }{
		{"", ""},
		{" \n", ""},
		{`{"templateID":"base","unknown":1}`, `field "unknown" is not supported by sandlot`},
		{`{"templateID":"base"} `, ""},
		{`{"templateID":`, "request body: unexpected EOF"},
		{`{"timeout":"ten"}`, `field "timeout": want int64, got string`},
		{`{"metadata":{"a":1}}`, `field "metadata": want string, got number`},
		{`{"autoResume":{"enabled":"yes"}}`, `field "autoResume.enabled"`},
		{`{} {}`, "data after the JSON value"},
		{`{}}`, "data after the JSON value"},
		{`{}]`, "data after the JSON value"},
		{`{} x`, "data after the JSON value"},
		{`[]`, "request body"},
	}
	for _, tc := range tests {
		var n newSandbox
		err := decodeJSON([]byte(tc.body), &n)
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("decode %q: %v, want no error", tc.body, err)
		case tc.msg != "" && (err == nil || err.Code != http.StatusBadRequest || !strings.Contains(err.Message, tc.msg)):
			t.Errorf("decode %q: %v, want a 400 containing %q", tc.body, err, tc.msg)
		}
	}
}

// validateCase is a create body and the 400 its validation gives ("":
// valid).
type validateCase struct {
	name string
	req  newSandbox
	msg  string
}

func checkValidate(t *testing.T, tests []validateCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.validate()
			switch {
			case tc.msg == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tc.msg != "" && (err == nil || err.Code != http.StatusBadRequest || !strings.Contains(err.Message, tc.msg)):
				t.Errorf("got %v, want a 400 containing %q", err, tc.msg)
			}
		})
	}
}

// TestEnvdVersionIsTheGuests: the API reports the envd version the guest
// agent implements (the SDKs gate features on it).
func TestEnvdVersionIsTheGuests(t *testing.T) {
	if DefaultEnvdVersion != envd.Version {
		t.Errorf("sandlot-api reports envd %s, sandlot-guest implements %s", DefaultEnvdVersion, envd.Version)
	}
}
