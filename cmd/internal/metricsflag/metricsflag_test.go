package metricsflag

import (
	"flag"
	"testing"
)

// TestMetricsFlags: the metrics are served as controller-runtime's
// secure default unless --metrics-secure=false.
func TestMetricsFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		secure bool
	}{{nil, true}, {[]string{"--metrics-secure=false"}, false}} {
		fs := flag.NewFlagSet("sandlot-controller", flag.ContinueOnError)
		m := Bind(fs, ":8080")
		if err := fs.Parse(append(tc.args, "--metrics-bind-address=:9443")); err != nil {
			t.Fatal(err)
		}
		o := m.Options()
		if o.BindAddress != ":9443" || o.SecureServing != tc.secure || (o.FilterProvider != nil) != tc.secure {
			t.Errorf("%v: address %q, secure %t, filter %t; want :9443, %t, %t", tc.args, o.BindAddress, o.SecureServing,
				o.FilterProvider != nil, tc.secure, tc.secure)
		}
	}
}
