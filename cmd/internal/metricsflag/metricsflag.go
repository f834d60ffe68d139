// Package metricsflag is the metrics flags the controller and the node
// agent share: one name for the address in every binary, and serving as
// controller-runtime's secure default unless turned off.
package metricsflag

import (
	"flag"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flags are where and how the metrics are served.
type Flags struct {
	addr   string
	secure bool
}

// Bind binds --metrics-bind-address (default addr) and --metrics-secure.
func Bind(fs *flag.FlagSet, addr string) *Flags {
	m := &Flags{}
	fs.StringVar(&m.addr, "metrics-bind-address", addr, "address of the metrics endpoint (0 disables it)")
	fs.BoolVar(&m.secure, "metrics-secure", true, "serve the metrics over HTTPS to callers the API server authenticates "+
		"and allows to get /metrics (TokenReview, SubjectAccessReview); false: plain HTTP to anyone")
	return m
}

// Options serve the metrics as controller-runtime's secure default does
// (HTTPS, a self-signed certificate, authentication and authorization by
// the API server) unless --metrics-secure=false.
func (m *Flags) Options() metricsserver.Options {
	o := metricsserver.Options{BindAddress: m.addr}
	if m.secure {
		o.SecureServing, o.FilterProvider = true, filters.WithAuthenticationAndAuthorization
	}
	return o
}
