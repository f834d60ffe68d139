package e2b

import (
	"net/url"
	"strings"
	"testing"
)

// sampleLog is a pod log as the kubelet returns it with timestamps: plain
// lines, a slog JSON line, and one cut short by LimitBytes.
const sampleLog = `2026-12-03T10:00:00.100000000Z sandlot sandbox sbx ready
2026-12-03T10:00:01.000000000Z {"time":"x","level":"WARN","msg":"disk almost full"}
2026-12-03T10:00:02.500000000Z {"level":"ERROR","msg":"lost the thing","extra":1}
2026-12-03T10:00:03.000000000Z plain again
2026-12-03T10:0`

func TestLogQueries(t *testing.T) {
	lines := parseLogLines(strings.NewReader(sampleLog))
	if len(lines) != 4 || lines[1].level != "warn" || lines[1].message != "disk almost full" || lines[0].level != "info" {
		t.Fatalf("parsed %+v", lines)
	}
	cases := []struct {
		query, cursor string
		want          []string // first words of the messages returned, in order
	}{
		{"", "cursor", []string{"sandlot", "disk", "lost", "plain"}},
		{"cursor=1764756001000", "cursor", nil}, // a year before: everything
		{"cursor=1796292001000", "cursor", []string{"disk", "lost", "plain"}},
		{"cursor=1796292002000&direction=backward", "cursor", []string{"disk", "sandlot"}},
		{"direction=backward&limit=2", "cursor", []string{"plain", "lost"}},
		{"level=warn", "cursor", []string{"disk", "lost"}},
		{"level=error&search=thing", "cursor", []string{"lost"}},
		{"search=again", "cursor", []string{"plain"}},
		{"start=1796292002600", "start", []string{"plain"}},
		{"limit=0", "cursor", []string{}},
	}
	for _, c := range cases {
		v, _ := url.ParseQuery(c.query)
		q, aerr := parseLogQuery(v, c.cursor)
		if aerr != nil {
			t.Fatalf("%q: %v", c.query, aerr)
		}
		var got []string
		for _, l := range q.apply(lines) {
			got = append(got, strings.Fields(l.message)[0])
		}
		if c.want == nil {
			c.want = []string{"sandlot", "disk", "lost", "plain"}
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q: got %v, want %v", c.query, got, c.want)
		}
	}
}

func TestLogQueryRefusals(t *testing.T) {
	for _, q := range []string{"cursor=soon", "cursor=-1", "limit=-1", "limit=10001", "limit=x",
		"direction=sideways", "level=fatal"} {
		v, _ := url.ParseQuery(q)
		if _, aerr := parseLogQuery(v, "cursor"); aerr == nil || aerr.Code != 400 {
			t.Errorf("%q: %v, want a 400", q, aerr)
		}
	}
}
