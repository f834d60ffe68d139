package server

import (
	"strings"
	"testing"
)

func TestWithCAReplacesTheBlock(t *testing.T) {
	sys := "-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----\n"
	one := string(withCA([]byte(sys), []byte("CA-ONE\n")))
	if !strings.HasPrefix(one, sys) || !strings.Contains(one, caBegin+"CA-ONE\n"+caEnd) {
		t.Fatalf("first install:\n%s", one)
	}
	// A restore's new CA replaces the old block; the system's stay.
	two := string(withCA([]byte(one+"-----BEGIN CERTIFICATE-----\nADDED LATER\n-----END CERTIFICATE-----"), []byte("CA-TWO")))
	if strings.Contains(two, "CA-ONE") || strings.Count(two, caBegin) != 1 || !strings.Contains(two, "ADDED LATER") ||
		!strings.HasPrefix(two, sys) || !strings.HasSuffix(two, caBegin+"CA-TWO\n"+caEnd) {
		t.Fatalf("second install:\n%s", two)
	}
	// A block cut short (its end lost) goes whole.
	three := string(withCA([]byte(sys+caBegin+"HALF"), []byte("CA-3")))
	if strings.Contains(three, "HALF") || !strings.HasPrefix(three, sys) {
		t.Fatalf("truncated block:\n%s", three)
	}
	if got := string(withCA(nil, []byte("CA"))); got != caBegin+"CA\n"+caEnd {
		t.Fatalf("no bundle: %q", got)
	}
}
