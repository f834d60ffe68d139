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

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
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
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: scraper, Namespace: ns}}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: scraper},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sandlot-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: scraper, Namespace: ns}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, scraper, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(2 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s: %w", ns, scraper, err)
	}
	return tr.Status.Token, nil
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
