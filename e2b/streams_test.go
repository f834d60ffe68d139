package e2b

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestStale(t *testing.T) {
	now := metav1.Now()
	sbx := func(rv, podIP string, deleting bool) *sandlotv1.Sandbox {
		s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
		s.Status.PodIP = podIP
		if deleting {
			s.DeletionTimestamp = &now
		}
		return s
	}
	f := inFlight{podIP: "10.0.0.1", version: "100"}
	tests := []struct {
		name string
		sbx  *sandlotv1.Sandbox
		want bool
	}{
		{"the same pod", sbx("101", "10.0.0.1", false), false},
		{"deleted", nil, true},
		{"being deleted", sbx("101", "10.0.0.1", true), true},
		{"paused: no pod", sbx("101", "", false), true},
		{"moved to another pod", sbx("101", "10.0.0.2", false), true},
		{"an older state the cache replays", sbx("99", "", false), false},
		{"the state it was read at", sbx("100", "", false), false},
		{"a version not a number: the pod decides", sbx("x", "10.0.0.2", false), true},
	}
	for _, tc := range tests {
		if got := stale(f, tc.sbx); got != tc.want {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestProxyCutsStreamsOfAMovedSandbox: a stream open through the proxy
// ends as soon as its sandbox's VM leaves the pod (a pause, a drain's
// move), where it used to hang until TCP gave up; another sandbox's
// stream runs on.
func TestProxyCutsStreamsOfAMovedSandbox(t *testing.T) {
	f := setup(t)
	t.Parallel()
	pod := newTestPod(t)
	id, token := f.readySandbox(t, newTestPod(t).Listener.Addr().String(), nil)
	otherID, otherToken := f.readySandbox(t, pod.Listener.Addr().String(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	moved := openStream(ctx, t, f.url, id, token)
	stays := openStream(ctx, t, f.url, otherID, otherToken)

	sbx := f.sandboxByID(t, id)
	sbx.Status.Phase, sbx.Status.PodIP = sandlotv1.SandboxPaused, ""
	if err := f.c.Status().Update(ctx, sbx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := io.ReadAll(moved); err == nil {
		t.Error("the moved sandbox's stream ended cleanly, want it cut")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the stream was cut %v after the sandbox left its pod", d)
	}
	select { // the other stream still answers
	case pod.next <- struct{}{}:
	case <-ctx.Done():
		t.Fatal("the other sandbox's stream was cut too")
	}
	buf := make([]byte, 64)
	if n, err := stays.Read(buf); err != nil || n == 0 {
		t.Errorf("the other stream after the cut: %d bytes, %v", n, err)
	}
}

// openStream opens /stream of sandbox id through the proxy and returns
// its body once the head is back.
func openStream(ctx context.Context, t *testing.T, base, id, token string) io.ReadCloser {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/stream", nil)
	req.Host = fmt.Sprintf("%d-%s.%s", sandlotv1.EnvdPort, id, testDomain)
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream of %s: %s", id, resp.Status)
	}
	return resp.Body
}

// sandboxByID reads the sandbox whose E2B ID is id from the API server.
func (f *fixture) sandboxByID(t *testing.T, id string) *sandlotv1.Sandbox {
	t.Helper()
	list := &sandlotv1.SandboxList{}
	if err := f.c.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if sandlotv1.SandboxIDFor(list.Items[i].UID) == id {
			return &list.Items[i]
		}
	}
	t.Fatalf("no sandbox %s", id)
	return nil
}
