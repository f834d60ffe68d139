package identity

import (
	"encoding/json"
	"testing"
)

func TestCheckToken(t *testing.T) {
	cases := []struct {
		name  string
		id    *Identity // nil: none pushed yet
		token string
		want  bool
	}{
		{"no identity, no token", nil, "", false},
		{"no identity, any token", nil, "anything", false},
		{"empty token, not open: no token", &Identity{SandboxID: "s"}, "", false},
		{"empty token, not open: any token", &Identity{SandboxID: "s"}, "anything", false},
		{"empty token, open: no token", &Identity{Open: true}, "", true},
		{"empty token, open: any token", &Identity{Open: true}, "anything", true},
		{"right token", &Identity{AccessToken: "s3cret"}, "s3cret", true},
		{"wrong token", &Identity{AccessToken: "s3cret"}, "s3cre", false},
		{"missing token", &Identity{AccessToken: "s3cret"}, "", false},
		{"token wins over open: right", &Identity{AccessToken: "s3cret", Open: true}, "s3cret", true},
		{"token wins over open: wrong", &Identity{AccessToken: "s3cret", Open: true}, "nope", false},
		{"token wins over open: missing", &Identity{AccessToken: "s3cret", Open: true}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{}
			if tc.id != nil {
				s.Set(*tc.id)
			}
			if got := s.CheckToken(tc.token); got != tc.want {
				t.Fatalf("CheckToken(%q) = %v, want %v", tc.token, got, tc.want)
			}
		})
	}
}

// TestAccess: what /files checks signatures against.
func TestAccess(t *testing.T) {
	s := &Store{}
	if tok, open := s.Access(); tok != "" || open {
		t.Fatalf("before Set: %q, %v", tok, open)
	}
	s.Set(Identity{Open: true})
	if tok, open := s.Access(); tok != "" || !open {
		t.Fatalf("open: %q, %v", tok, open)
	}
	s.Set(Identity{AccessToken: "t", Open: true})
	if tok, open := s.Access(); tok != "t" || open {
		t.Fatalf("token and open: %q, %v", tok, open)
	}
	s.Set(Identity{})
	if tok, open := s.Access(); tok != "" || open {
		t.Fatalf("pushed without token: %q, %v", tok, open)
	}
}

// TestOpenWireName: the control channel carries Identity inline as JSON;
// the host must spell the field "open".
func TestOpenWireName(t *testing.T) {
	var id Identity
	if err := json.Unmarshal([]byte(`{"sandboxID":"s","open":true}`), &id); err != nil || !id.Open {
		t.Fatalf("decode: %+v, %v", id, err)
	}
	b, err := json.Marshal(Identity{SandboxID: "s"})
	if err != nil || string(b) != `{"sandboxID":"s"}` {
		t.Fatalf("a closed identity encodes as %s (%v): open must be omitted", b, err)
	}
}
