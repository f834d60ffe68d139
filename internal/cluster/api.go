package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// apiTLSSecret is the chart's api.tls.secretName with APIDomain.
const apiTLSSecret = "sandlot-api-tls"

// APIURL is where the chart's sandlot-api answers (plain HTTP): its
// Service, which kube-proxy routes on this host.
func (c *Cluster) APIURL(ctx context.Context) (string, error) {
	svc, err := c.apiService(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "http" {
			return fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, p.Port), nil
		}
	}
	return "", fmt.Errorf("the API's Service %s has no http port", svc.Spec.ClusterIP)
}

// APIServiceIP is the API Service's cluster IP (its https port is 443
// with APIDomain).
func (c *Cluster) APIServiceIP(ctx context.Context) (string, error) {
	svc, err := c.apiService(ctx)
	if err != nil {
		return "", err
	}
	return svc.Spec.ClusterIP, nil
}

func (c *Cluster) apiService(ctx context.Context) (*corev1.Service, error) {
	cs, err := c.Clientset()
	if err != nil {
		return nil, err
	}
	svc, err := cs.CoreV1().Services(ReleaseNamespace).Get(ctx, "sandlot-api", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the API's Service: %w", err)
	}
	return svc, nil
}

// APIAddress is the address of the API bridge (the host's side of the
// cluster network).
func (c *Cluster) APIAddress() string { return c.apiIP }

// IssueAPIKey issues a key as the chart's NOTES tell an admin to: it
// runs `sandlot-api issue-key` in the API's pod (its service account
// writes the key's hash to the keys Secret) and returns the key.
func (c *Cluster) IssueAPIKey(ctx context.Context, args ...string) (string, error) {
	key, err := IssueKeyInPod(ctx, c.Kubeconfig, args...)
	if err != nil {
		return "", err
	}
	return key, c.waitKeyAccepted(ctx, key)
}

// IssueKeyInPod runs `sandlot-api issue-key args...` in the chart's API
// pod of the cluster kubeconfig names and returns the key it printed.
func IssueKeyInPod(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	return issueInPod(ctx, kubeconfig, "issue-key", "e2b_", args...)
}

// IssueAccessToken runs `sandlot-api issue-token args...` in the chart's
// API pod (as its service account) and returns the token it printed; the
// API reads a token it does not know yet from the API server at once.
func (c *Cluster) IssueAccessToken(ctx context.Context, args ...string) (string, error) {
	return issueInPod(ctx, c.Kubeconfig, "issue-token", "sk_e2b_", args...)
}

func issueInPod(ctx context.Context, kubeconfig, sub, prefix string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig, "-n", ReleaseNamespace,
		"exec", "deploy/sandlot-api", "-c", "api", "--", "/sandlot-api", sub}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("sandlot-api %s in the API's pod: %w: %s", sub, err, stderr.String())
	}
	v := strings.TrimSpace(string(out))
	if !strings.HasPrefix(v, prefix) || strings.ContainsAny(v, " \n") {
		return "", fmt.Errorf("sandlot-api %s printed %q, want one %s credential", sub, v, prefix)
	}
	return v, nil
}

// waitKeyAccepted waits until the chart's API accepts key: the API reads
// the keys Secret through its cache, so a key is good a moment after
// issue-key wrote it (a create right away may be a 401).
func (c *Cluster) waitKeyAccepted(ctx context.Context, key string) error {
	api, err := c.APIURL(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return poll.Every(ctx, 100*time.Millisecond, "the API accepting the issued key", func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/sandboxes", nil)
		if err != nil {
			return poll.Stop(err)
		}
		req.Header.Set("X-API-KEY", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /sandboxes: %s", resp.Status)
		}
		return nil
	})
}

// preinstall makes what an admin makes before helm install: the team
// namespaces the chart's values name (the chart binds the API's role in
// them), and with APIDomain the release namespace holding the API's TLS
// Secret.
func (c *Cluster) preinstall() error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range append([]string{ReleaseNamespace}, c.Teams...) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", name, err)
		}
	}
	return c.apiTLS(ctx)
}

// apiTLS writes the API's wildcard certificate for *.APIDomain (from the
// cluster's CA) as the chart's api.tls Secret.
func (c *Cluster) apiTLS(ctx context.Context) error {
	if c.APIDomain == "" {
		return nil
	}
	certPath, keyPath, err := c.PKI.IssueServingCert(c.Dir, "sandbox-proxy", "*."+c.APIDomain)
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(certPath)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(keyPath)
	if err != nil {
		return err
	}
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: apiTLSSecret, Namespace: ReleaseNamespace},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}}
	if _, err := cs.CoreV1().Secrets(ReleaseNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("the API's TLS Secret: %w", err)
	}
	return nil
}
