package e2b

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// SecureMetricsHandler is MetricsHandler for the callers the API server
// vouches for, as controller-runtime serves the controller's and the
// agent's metrics: the bearer token is authenticated with a TokenReview
// and its user authorized to get the non-resource URL /metrics with a
// SubjectAccessReview (the chart's ClusterRole sandlot-metrics-reader
// grants that). The answers are cached: a token's for a minute, an
// allowed user's for five, a denied one's for 30 s. cfg is the API's
// own client config; its service account may create both reviews.
func SecureMetricsHandler(cfg *rest.Config, log logr.Logger) (http.Handler, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	return filter(log, MetricsHandler())
}

// SelfSignedTLS is a server TLS config with a certificate made at start,
// as controller-runtime's metrics server makes one when given none: the
// scrape is encrypted, and the scraper skips verification (the bearer
// token, not the certificate, is what is checked).
func SelfSignedTLS() (*tls.Config, error) {
	cert, key, err := certutil.GenerateSelfSignedCertKeyWithFixtures("localhost", []net.IP{{127, 0, 0, 1}}, nil, "")
	if err != nil {
		return nil, fmt.Errorf("self-signed metrics certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("self-signed metrics key pair: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}
