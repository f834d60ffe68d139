package release

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandlot-dev/sandlot/internal/dashboard"
)

// The chart serves every component's metrics over HTTPS to callers the
// API server authenticates and allows to get /metrics: the suite scrapes
// as a Prometheus would, with the token of a service account bound to
// the chart's ClusterRole sandlot-metrics-reader.
const scraper = "sandlot-release-scraper"

var (
	scrapeOnce  sync.Once
	scrapeToken string
	scrapeErr   error
)

// metricsToken is the scraper's token, its service account and binding
// made on first use (kept: the next run finds them).
func metricsToken(t *testing.T) string {
	t.Helper()
	scrapeOnce.Do(func() { scrapeToken, scrapeErr = newScraperToken(context.Background()) })
	if scrapeErr != nil {
		t.Fatalf("a token to scrape metrics with: %v", scrapeErr)
	}
	return scrapeToken
}

func newScraperToken(ctx context.Context) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	return dashboard.ScraperToken(ctx, cs, ns, scraper)
}

// scrapeClient skips verification of the components' self-signed
// certificates, as the chart's ServiceMonitor does.
var scrapeClient = &http.Client{Timeout: 20 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// scrape GETs https://<hostPort>/metrics with the scraper's token.
func scrape(t *testing.T, hostPort string) (string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://"+hostPort+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+metricsToken(t))
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET https://%s/metrics: %d %s", hostPort, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}
