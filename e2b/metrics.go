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
		Help: "Sandbox traffic by outcome: forwarded, refused (token), unavailable (unknown, paused, not running), resumed (autoResume).",
	}, []string{"outcome"})
)

func init() {
	registry.MustRegister(requests, requestSeconds, proxied, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
