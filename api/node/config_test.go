package node

import (
	"strings"
	"testing"
)

// TestValidateShimMemoryMaxMiB: unset or 0 (no cap) or at least the floor.
func TestValidateShimMemoryMaxMiB(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		v  *int
		ok bool
	}{{nil, true}, {n(0), true}, {n(MinShimMemoryMaxMiB), true}, {n(1024), true}, {n(32), false}, {n(-1), false}} {
		c := Config{Kernel: "/k", Initrd: "/i", ShimMemoryMaxMiB: tc.v}
		c.Defaults()
		err := c.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "shimMemoryMaxMiB")) {
			t.Errorf("%v: %v, want ok %v", tc.v, err, tc.ok)
		}
	}
}
