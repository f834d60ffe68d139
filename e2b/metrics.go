package e2b

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The API's metrics, on a registry of its own (sandlot-api serves it on
// --metrics-listen).
var (
	registry = prometheus.NewRegistry()
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_api_requests_total",
		Help: "E2B API requests by route (the mux pattern) and status code.",
	}, []string{"route", "code"})
	requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandlot_api_request_seconds",
		Help:    "E2B API request durations by route; a create waits until the VM is ready.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 15), // 5 ms .. ~80 s
	}, []string{"route"})
	proxied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_api_proxy_requests_total",
		Help: "Sandbox traffic by outcome: forwarded, refused (token), unavailable (unknown, paused, not running), resumed (autoResume), moved (held while a drain moved it), held (held while it resumed or started).",
	}, []string{"outcome"})
	proxyCut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sandlot_api_proxy_cut_total",
		Help: "Sandbox requests in flight (streams) cut because the sandbox's VM left the pod they went to: paused, moved by a drain, deleted.",
	})
	createFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_api_create_failures_total",
		Help: "Sandbox creates (POST /sandboxes) that failed, by reason: Invalid, RateLimited, TemplateNotFound, QuotaExceeded, " +
			"Refused, SandboxFailed, Deleted, Timeout, ClientGone, Error.",
	}, []string{"reason"})
)

func init() {
	registry.MustRegister(requests, requestSeconds, proxied, proxyCut, createFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// Where a create stands, for the reason of its failure.
type createStage int

const (
	createRequest createStage = iota // the request, its rate, the Sandbox object
	createResolve                    // the template ID
	createStart                      // the Sandbox's create
	createWait                       // its start, until usable
)

// createFailureReason names a failed create from where it failed and the
// answer's code: a bounded set, never the message.
func createFailureReason(stage createStage, code int) string {
	switch {
	case code == http.StatusTooManyRequests && stage == createStart:
		return "QuotaExceeded" // the team's ResourceQuota (kubeError)
	case code == http.StatusTooManyRequests:
		return "RateLimited"
	case code == http.StatusNotFound && stage == createResolve:
		return "TemplateNotFound"
	case code == http.StatusGone:
		return "Deleted"
	case code == http.StatusGatewayTimeout:
		return "Timeout"
	case code == 499:
		return "ClientGone"
	case stage == createRequest && code >= 400 && code < 500:
		return "Invalid"
	case stage == createStart && code >= 400 && code < 500:
		return "Refused" // the API server refused the Sandbox
	case stage == createWait:
		return "SandboxFailed" // it failed to start
	}
	return "Error"
}

// observeCreateFailure counts a create that answered err (nil: none).
func observeCreateFailure(stage createStage, err *apiError) {
	if err != nil {
		createFailures.WithLabelValues(createFailureReason(stage, err.Code)).Inc()
	}
}

// MetricsHandler serves the API's metrics in Prometheus' format.
func MetricsHandler() http.Handler { return promhttp.HandlerFor(registry, promhttp.HandlerOpts{}) }

func observeRequest(r *http.Request, code int, took time.Duration) {
	route := r.Pattern
	if route == "" {
		route = "unmatched"
	}
	requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	requestSeconds.WithLabelValues(route).Observe(took.Seconds())
}
