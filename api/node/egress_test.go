package node

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func TestEgressRefusal(t *testing.T) {
	e, err := NetworkConfig{OpenOut: []string{"10.20.0.0/16", "169.254.169.254"}}.Egress()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		allow string
		want  string // "" = accepted
	}{
		{"8.8.8.8/32", ""},
		{"10.0.0.1/32", "10.0.0.1 is inside 10.0.0.0/8"},                   // the kube-apiserver Service
		{"169.254.169.253/32", "169.254.169.253 is inside 169.254.0.0/16"}, // metadata's neighbour
		{"10.0.0.0/8", "10.0.0.0/8 is inside 10.0.0.0/8"},
		{"192.168.1.0/24", "192.168.1.0/24 is inside 192.168.0.0/16"},
		{"10.20.3.0/24", ""},       // inside what the operator opens
		{"169.254.169.254/32", ""}, // opened by address
		{"0.0.0.0/0", ""},          // wider than every denial: they stay closed
		{"8.0.0.0/5", ""},          // holds 10.0.0.0/8, which stays closed
	} {
		err := e.Refusal([]netip.Prefix{netip.MustParsePrefix(tc.allow)})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.allow, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "network.openOut")):
			t.Errorf("%s: got %v, want an error naming %q and the chart value", tc.allow, err, tc.want)
		}
	}
}

func TestEgressConfig(t *testing.T) {
	if _, err := (NetworkConfig{OpenOut: []string{"8.8.8.0/24"}}).Egress(); err == nil || !strings.Contains(err.Error(), "not inside") {
		t.Errorf("an openOut outside every denial: %v, want refused", err)
	}
	if _, err := (NetworkConfig{OpenOut: []string{"10.0.0.1/8"}}).Egress(); err == nil || !strings.Contains(err.Error(), "host bits") {
		t.Errorf("an openOut with host bits: %v, want refused", err)
	}
	e, err := NetworkConfig{}.Egress()
	if err != nil || len(e.Deny) != len(DefaultDenyOut) || len(e.Open) != 0 {
		t.Errorf("defaults: %+v, %v", e, err)
	}
}

// TestEmptyDenyOutSurvivesTheConfigFile: an operator's empty denyOut is
// no denials on the node, as sandlot-api reads the same value; only an
// absent one is the default.
func TestEmptyDenyOutSurvivesTheConfigFile(t *testing.T) {
	for _, tc := range []struct {
		in   NetworkConfig
		want int
	}{{NetworkConfig{DenyOut: []string{}}, 0}, {NetworkConfig{}, len(DefaultDenyOut)}} {
		raw, err := json.Marshal(Config{Network: tc.in})
		if err != nil {
			t.Fatal(err)
		}
		var back Config
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		back.Defaults()
		e, err := back.Network.Egress()
		if err != nil || len(e.Deny) != tc.want {
			t.Errorf("denyOut %v through %s: %d denials (%v), want %d", tc.in.DenyOut, raw, len(e.Deny), err, tc.want)
		}
	}
}
