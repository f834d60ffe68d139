package e2b

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/api/node"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestPlatformRefusal: an allowOut inside the platform's denials is a 400
// naming the field, the entry and the denied range; domains, public
// addresses, ranges the operator opens and ranges wider than a denial
// pass.
func TestPlatformRefusal(t *testing.T) {
	egress, err := node.NetworkConfig{OpenOut: []string{"10.20.0.0/16"}}.Egress()
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Egress: egress, Log: slog.New(slog.DiscardHandler)}, nil)
	for _, tc := range []struct {
		allow []string
		want  string
	}{
		{[]string{"example.com", "10.0.0.1"}, `field "network.allowOut": 10.0.0.1 is inside 10.0.0.0/8, which the platform denies`},
		{[]string{"169.254.169.254/32"}, "169.254.169.254 is inside 169.254.0.0/16"},
		{[]string{"example.com", "*.example.org", "8.8.8.8", "0.0.0.0/0", "10.20.1.0/24"}, ""},
	} {
		err := s.platformRefusal("network.", &sandlotv1.SandboxNetwork{AllowOut: tc.allow})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v refused: %s", tc.allow, err.Message)
		case tc.want != "" && (err == nil || err.Code != http.StatusBadRequest || !strings.Contains(err.Message, tc.want)):
			t.Errorf("%v: %+v, want 400 with %q", tc.allow, err, tc.want)
		}
	}
}

// TestProxyRefusal: an egress proxy at an address the platform denies
// (the metadata service, a private range) is refused before the sandbox
// exists, as E2B refuses internal proxies; a public one and a range the
// operator opens pass.
func TestProxyRefusal(t *testing.T) {
	egress, err := node.NetworkConfig{OpenOut: []string{"10.20.0.0/16"}}.Egress()
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Egress: egress, Log: slog.New(slog.DiscardHandler)}, nil)
	for addr, want := range map[string]string{
		"169.254.169.254:1080": `field "network.egressProxy.address": 169.254.169.254 is inside 169.254.0.0/16`,
		"10.1.2.3:1080":        "10.1.2.3 is inside 10.0.0.0/8",
		"localhost:1080":       "127.0.0.1 is inside 127.0.0.0/8",
		"192.0.2.7:1080":       "",
		"10.20.1.1:1080":       "",
	} {
		err := s.proxyRefusal(context.Background(), "network.", &sandlotv1.EgressProxy{Address: addr})
		switch {
		case want == "" && err != nil:
			t.Errorf("%s refused: %s", addr, err.Message)
		case want != "" && (err == nil || err.Code != http.StatusBadRequest || !strings.Contains(err.Message, want)):
			t.Errorf("%s: %+v, want 400 with %q", addr, err, want)
		}
	}
}
