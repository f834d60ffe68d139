package main

import "testing"

// TestMetricsFlags: --metrics-bind-address, every binary's name, and the
// deprecated --metrics-listen both set the metrics address; HTTPS with
// authentication unless --metrics-secure=false.
func TestMetricsFlags(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		addr       string
		deprecated bool
		secure     bool
	}{
		{nil, "", false, true},
		{[]string{"--metrics-bind-address=:9090"}, ":9090", false, true},
		{[]string{"--metrics-listen=:9091"}, ":9091", true, true},
		{[]string{"--metrics-bind-address=:9090", "--metrics-secure=false"}, ":9090", false, false},
	} {
		_, lf, err := parseServeFlags(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if lf.metricsListen != tc.addr || lf.metricsListenUsed != tc.deprecated || lf.secureMetrics != tc.secure {
			t.Errorf("%v: address %q, deprecated name %t, secure %t; want %q, %t, %t", tc.args, lf.metricsListen,
				lf.metricsListenUsed, lf.secureMetrics, tc.addr, tc.deprecated, tc.secure)
		}
	}
	for _, addr := range []string{"", "0"} {
		if h, tlsCfg, err := metricsHandler(listenFlags{metricsListen: addr, secureMetrics: true}, nil); h != nil || tlsCfg != nil || err != nil {
			t.Errorf("metrics at %q: served (%v, %v)", addr, h != nil, err)
		}
	}
	if h, tlsCfg, err := metricsHandler(listenFlags{metricsListen: ":9090"}, nil); h == nil || tlsCfg != nil || err != nil {
		t.Errorf("insecure metrics: handler %t, TLS %t, %v; want plain HTTP", h != nil, tlsCfg != nil, err)
	}
}
