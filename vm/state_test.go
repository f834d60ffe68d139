package vm

import (
	"errors"
	"testing"
)

func TestTransitions(t *testing.T) {
	ok := [][2]State{{Created, Booting}, {Created, Restoring}, {Booting, Running}, {Restoring, Running},
		{Restoring, Paused}, {Running, Paused}, {Paused, Running}, {Running, Stopped}, {Paused, Stopped}, {Booting, Stopped}}
	for _, tc := range ok {
		if got, err := next(tc[0], tc[1]); err != nil || got != tc[1] {
			t.Errorf("%s -> %s: %v", tc[0], tc[1], err)
		}
	}
	bad := [][2]State{{Created, Running}, {Created, Paused}, {Stopped, Running}, {Stopped, Booting}, {Running, Booting},
		{Paused, Restoring}, {Running, Restoring}, {Booting, Paused}}
	for _, tc := range bad {
		got, err := next(tc[0], tc[1])
		var te *ErrTransition
		if !errors.As(err, &te) || got != tc[0] {
			t.Errorf("%s -> %s allowed (%v)", tc[0], tc[1], err)
		}
	}
}

func TestChooseAccel(t *testing.T) {
	cases := []struct {
		override, cpuinfo, want string
		err                     bool
	}{
		{"", "flags\t: fpu vme vmx sse", AccelKVM, false},
		{"", "flags\t: fpu svm", AccelKVM, false},
		{"", "flags\t: fpu sse4_2 hypervisor", AccelTCG, false},
		{"tcg", "flags\t: vmx", AccelTCG, false},
		{"kvm", "flags\t: fpu", AccelKVM, false},
		{"hvf", "", "", true},
	}
	for _, tc := range cases {
		got, err := chooseAccel(tc.override, tc.cpuinfo)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("chooseAccel(%q, %q) = %q, %v", tc.override, tc.cpuinfo, got, err)
		}
	}
}
