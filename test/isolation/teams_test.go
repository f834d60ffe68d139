package isolation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/e2b"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// teamB is the second team the API serves (the chart's api.teams): the
// attacker of these tests, with an API key of its own; the API's own
// namespace (default) is the victim, team A.
const teamB = "team-b"

// unreachableImage names a registry on a port nothing listens on: its
// pull fails with the node's answer ("connection refused"), which no
// tenant may read back.
const unreachableImage = "127.0.0.1:1/hijack/base:1"

// answer is one API response, read whole.
type answer struct {
	code int
	body string
}

// callAPI sends method path body with key to the chart's API Service.
func callAPI(t *testing.T, key, method, path string, body any) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, err := c.APIURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(ctx, method, base+path, rd)
	req.Header.Set("X-API-KEY", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return answer{resp.StatusCode, string(b)}
}

func (a answer) want(t *testing.T, what string, code int, substr string) {
	t.Helper()
	if a.code != code || !strings.Contains(a.body, substr) {
		t.Fatalf("%s: %d %s; want %d with %q", what, a.code, a.body, code, substr)
	}
}

// TestKeysAtRest (row 10): keys issued as the chart's NOTES say work on
// the first request, and no keys Secret holds a key: only salted hashes.
func TestKeysAtRest(t *testing.T) {
	k := sbxtest.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keyA, err := cluster.IssueKeyInPod(ctx, c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := cluster.IssueKeyInPod(ctx, c.Kubeconfig, "--team="+teamB)
	if err != nil {
		t.Fatal(err)
	}
	callAPI(t, keyB, "GET", "/sandboxes", nil).want(t, "team B's key on its first request", http.StatusOK, "[")
	secrets := &corev1.SecretList{}
	if err := k.List(ctx, secrets, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, s := range secrets.Items {
		if s.Name != "sandlot-api-keys" && s.Labels[e2b.LabelTeam] == "" {
			continue
		}
		for name, v := range s.Data {
			seen++
			for _, key := range []string{keyA, keyB} {
				if strings.Contains(string(v), strings.TrimPrefix(key, "e2b_")) || !strings.HasPrefix(string(v), "sandlot-sha256:") {
					t.Errorf("Secret %s key %s holds %q: want a salted hash, never the key", s.Name, name, v)
				}
			}
		}
	}
	if seen < 2 {
		t.Fatalf("%d stored keys found in the keys Secrets, want both issued", seen)
	}
}

// TestTeamNamesCannotBeHijacked (rows 1, 9, 10): team B makes a template
// named "base" — the SDK's default ID — and tries to publish it: refused
// by name. Team A's default create never resolves to B's template; A
// reaches B's public templates only as team-b/<name>. B's template names
// an image on an unreachable registry: its status says the pull failed,
// not what the node's dial answered. A build asking for 64 vCPU is refused
// naming the operator's limit.
func TestTeamNamesCannotBeHijacked(t *testing.T) {
	k := sbxtest.Client(t, c)
	isoTemplate(t, k) // team A's template, for the allowOut check
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keyA, err := c.IssueAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := c.IssueAPIKey(ctx, "--team="+teamB)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"base", "tools"} {
		tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamB},
			Spec: sandlotv1.TemplateSpec{Image: unreachableImage, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 128}}}
		if err := k.Create(context.Background(), tpl); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Delete(context.Background(), tpl) })
	}
	callAPI(t, keyB, "PATCH", "/templates/base", map[string]any{"public": true}).want(t, "team B publishing base",
		http.StatusBadRequest, "reserved by the operator")
	callAPI(t, keyB, "PATCH", "/templates/tools", map[string]any{"public": true}).want(t, "team B publishing tools", http.StatusOK, "tools")
	callAPI(t, keyA, "POST", "/sandboxes", map[string]any{"templateID": "tools"}).want(t, "team A creating bare tools",
		http.StatusNotFound, "tools")
	// Team A has no default template here: its create of the SDK default
	// must fail naming its own, never fall through to team B's "base".
	a := callAPI(t, keyA, "POST", "/sandboxes", map[string]any{"templateID": "base"})
	a.want(t, "team A's create of the SDK default", http.StatusNotFound, "resolves to the default template")
	a.want(t, "team A's create of the SDK default", http.StatusNotFound, "does not exist in namespace default")
	if strings.Contains(a.body, teamB) {
		t.Fatalf("team A's create of the SDK default names team B's template: %s", a.body)
	}
	mirrors := &sandlotv1.TemplateList{}
	if err := k.List(ctx, mirrors, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, m := range mirrors.Items {
		if src := m.Annotations[e2b.AnnotationPublicSource]; strings.HasPrefix(src, teamB+"/") {
			t.Fatalf("team A's namespace holds template %s copied from %s without asking for it", m.Name, src)
		}
	}
	callAPI(t, keyB, "POST", "/v3/templates", map[string]any{"name": "big", "cpuCount": 64, "memoryMB": 512}).want(t,
		"a build of 64 vCPU", http.StatusBadRequest, "api.buildResources.maxVCPU")
	callAPI(t, keyB, "GET", "/templates/ghost/files/"+strings.Repeat("ab", 32), nil).want(t,
		"an upload link with no build", http.StatusNotFound, "no build awaiting files")
	callAPI(t, keyA, "POST", "/sandboxes", map[string]any{"templateID": "iso", "network": map[string]any{
		"allowOut": []string{"169.254.169.254"}}}).want(t, "allowOut of the metadata address", http.StatusBadRequest, "network.allowOut")
	checkPullFailureHidden(t, k, client.ObjectKey{Namespace: teamB, Name: "base"})
}

// checkPullFailureHidden waits for the template's base to fail on its
// image and checks the message names the image, not the registry's answer.
func checkPullFailureHidden(t *testing.T, k client.Client, key client.ObjectKey) {
	t.Helper()
	tpl := &sandlotv1.Template{}
	poll.Eventually(t, 3*time.Minute, "template "+key.String()+"'s base failing on its image", func() error {
		if err := k.Get(context.Background(), key, tpl); err != nil {
			return err
		}
		for _, b := range tpl.Status.BaseSnapshots {
			if b.Phase == sandlotv1.BaseFailed && b.Reason == sandlotv1.ReasonImageMissing {
				return nil
			}
		}
		return fmt.Errorf("bases %+v", tpl.Status.BaseSnapshots)
	})
	for _, b := range tpl.Status.BaseSnapshots {
		if b.Phase != sandlotv1.BaseFailed {
			continue
		}
		if !strings.Contains(b.Message, "could not be pulled") || strings.Contains(b.Message, "dial tcp") ||
			strings.Contains(b.Message, "connection refused") {
			t.Errorf("node %s: base message %q: want that the pull failed, not the registry's answer", b.Node, b.Message)
		}
	}
}
