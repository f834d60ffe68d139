package main

import (
	"crypto/tls"
	"flag"
	"net/http"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandlot-dev/sandlot/e2b"
)

// metricsFlags: --metrics-bind-address, the controller's and the agent's
// name; --metrics-listen, its old name here, still sets it.
func metricsFlags(fs *flag.FlagSet, lf *listenFlags) {
	fs.StringVar(&lf.metricsListen, "metrics-bind-address", "", "address of /metrics (Prometheus); none when empty or 0")
	fs.Func("metrics-listen", "deprecated: --metrics-bind-address", func(v string) error {
		lf.metricsListen, lf.metricsListenUsed = v, true
		return nil
	})
	fs.BoolVar(&lf.secureMetrics, "metrics-secure", true, "serve the metrics over HTTPS to callers the API server authenticates "+
		"and allows to get /metrics (TokenReview, SubjectAccessReview); false: plain HTTP to anyone")
}

// metricsHandler is what lf says to serve on the metrics listener (nil:
// none) and its TLS config (nil: plain HTTP).
func metricsHandler(lf listenFlags, cfg *rest.Config) (http.Handler, *tls.Config, error) {
	if lf.metricsListen == "" || lf.metricsListen == "0" {
		return nil, nil, nil
	}
	if !lf.secureMetrics {
		return e2b.MetricsHandler(), nil, nil
	}
	h, err := e2b.SecureMetricsHandler(cfg, ctrl.Log.WithName("metrics"))
	if err != nil {
		return nil, nil, err
	}
	tlsCfg, err := e2b.SelfSignedTLS()
	return h, tlsCfg, err
}
