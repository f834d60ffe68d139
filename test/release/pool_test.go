package release

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// warmPoolClaims: with the chart's RBAC, a Template's warm pool fills and
// sandboxes created through kubectl and through the E2B API take its pods
// (ClaimedFromPool, shown by kubectl describe) and run. The claim is a pod
// patch: a chart that did not grant it left every such sandbox Pending.
func warmPoolClaims(t *testing.T) {
	kubectl(t, "patch", "tpl", "python", "--type=merge", "-p", `{"spec":{"warmPool":2}}`)
	defer kubectl(t, "patch", "tpl", "python", "--type=merge", "-p", `{"spec":{"warmPool":0}}`)
	// Two ready pool pods, one per create below: a refill after the first
	// claim is not waited for.
	poll.Eventually(t, 5*time.Minute, "two warm pool pods ready", func() error {
		out := kubectl(t, "get", "tpl", "python", "-o", "jsonpath={.status.pool[*].ready}")
		total := 0
		for _, n := range strings.Fields(out) {
			v, err := strconv.Atoi(n)
			if err != nil {
				return fmt.Errorf("pool ready count %q: %w", n, err)
			}
			total += v
		}
		if total < 2 {
			return fmt.Errorf("pool ready counts %q", out)
		}
		return nil
	})
	plugin(t, "create", "--template", "python", "pooled-kubectl", "--wait")
	claimed(t, "pooled-kubectl")
	name := e2bCreate(t, "python")
	running(t, name)
	claimed(t, name)
	plugin(t, "delete", "--wait", "pooled-kubectl", name)
}

// claimed checks a sandbox took a pool pod, in its status and in what
// kubectl describe shows (the Event).
func claimed(t *testing.T, name string) {
	t.Helper()
	s := sandboxOf(t, name)
	var reason string
	for _, c := range s.Status.Conditions {
		if c.Type == sandlotv1.ConditionScheduled {
			reason = c.Reason
		}
	}
	if reason != sandlotv1.ReasonClaimedFromPool {
		t.Fatalf("sandbox %s: Scheduled reason %q, want %s", name, reason, sandlotv1.ReasonClaimedFromPool)
	}
	poll.Eventually(t, 30*time.Second, "kubectl describe shows the claim", func() error {
		if out := kubectl(t, "describe", "sbx", name); !strings.Contains(out, sandlotv1.ReasonClaimedFromPool) {
			return fmt.Errorf("describe sbx %s:\n%s", name, out)
		}
		return nil
	})
}

// e2bCreate creates a sandbox of template through the chart's API Service
// (E2B's POST /sandboxes, as the SDK sends it) and returns its Sandbox's
// name.
func e2bCreate(t *testing.T, template string) string {
	t.Helper()
	url := serviceURL(t, cluster.ReleaseNamespace, "sandlot-api")
	body, _ := json.Marshal(map[string]any{"templateID": template, "timeout": 300})
	req, err := http.NewRequest(http.MethodPost, url+"/sandboxes", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-KEY", apiKey(t))
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("POST /sandboxes: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		dumpAPI(t)
		t.Fatalf("POST /sandboxes: %s (%v)", resp.Status, err)
	}
	list := &sandlotv1.SandboxList{}
	if err := e.k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Status.SandboxID == out.SandboxID || sandlotv1.SandboxIDFor(s.UID) == out.SandboxID {
			return s.Name
		}
	}
	t.Fatalf("no Sandbox with ID %s", out.SandboxID)
	return ""
}

// apiKey is a key issued as the chart's NOTES say, once per run.
func apiKey(t *testing.T) string {
	t.Helper()
	if issuedKey == "" {
		key, err := cluster.IssueKeyInPod(context.Background(), e.kubeconfig, "--namespace="+ns)
		if err != nil {
			t.Fatal(err)
		}
		issuedKey = key
	}
	return issuedKey
}

var issuedKey string
