package network

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestClosedByDefault: a sandbox with no rules reaches the public web host
// and resolves its name and the cluster's names, and is refused by everything private that the
// host itself connects to: another sandbox's web server and envd, the API
// server (its Service and its address), its node's kubelet and agent,
// the other node, and the metadata-like address. The node (the test
// process) still reaches the sandbox's envd.
func TestClosedByDefault(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, tpl)
	sbxs := sbxtest.Create(t, k, tpl, "net-a", "net-b")
	a, b := sbxs["net-a"], sbxs["net-b"]
	startWebServer(t, k, b)
	here, other := nodeIPs(t, a.Status.NodeName)
	// The chart's node agent on a's node: a pod whose address the shims
	// admit into the sandboxes (builds), never the other way.
	private := append([]string{
		net.JoinHostPort(b.Status.PodIP, "8000"), net.JoinHostPort(b.Status.PodIP, "49983"),
		kubernetesService(t, k), strings.TrimPrefix(c.APIServer, "https://"),
		net.JoinHostPort(here, "10250"), net.JoinHostPort(other, "10250"),
	}, agentListeners(t, a.Status.NodeName)...)
	hostReaches(t, private...)
	var wants []want
	for _, addr := range private {
		wants = append(wants, refused(addr))
	}
	svc, _, _ := net.SplitHostPort(kubernetesService(t, k))
	wants = append(wants, refused(inet.IPMeta+":80"), reached(inet.IPPublic), resolves("public.test", inet.IPPublic),
		// Through the cluster's DNS (CoreDNS behind kube-dns): by full name
		// and by the pod's search domains.
		resolves("kubernetes.default.svc."+cluster.ClusterDomain, svc), resolves("kubernetes.default", svc))
	expect(t, k, a, wants...)
	if code := envdHealth(t, a); code != http.StatusNoContent {
		t.Fatalf("the host's GET /health of %s's envd: %d, want 204", a.Name, code)
	}
}

// agentListeners are the addresses the chart's agent pod on node serves
// (its probes and metrics).
func agentListeners(t *testing.T, node string) []string {
	t.Helper()
	pod, err := c.AgentPod(node)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			out = append(out, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(p.ContainerPort))))
		}
	}
	if len(out) == 0 {
		t.Fatalf("the agent pod %s serves no port", pod.Name)
	}
	return out
}

// startWebServer starts `python3 -m http.server 8000` in sbx and waits
// until it answers inside the sandbox.
func startWebServer(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox) {
	t.Helper()
	out := sbxtest.EnvdRun(t, k, sbx, "cd /tmp && nohup python3 -m http.server --bind 0.0.0.0 8000 >/dev/null 2>&1 & echo started")
	if !strings.Contains(out, "started") {
		t.Fatalf("start the web server in %s: %q", sbx.Name, out)
	}
	local := []want{{"http 127.0.0.1:8000", "OK 200 *"}}
	poll.Eventually(t, time.Minute, "the web server answering inside "+sbx.Name, func() error {
		got, raw := probe(t, k, sbx, local)
		if err := mismatches(got, local); err != nil {
			return fmt.Errorf("%v (%q)", err, raw)
		}
		return nil
	})
}

// nodeIPs are the addresses of the node named and of the other one.
func nodeIPs(t *testing.T, node string) (here, other string) {
	t.Helper()
	for _, n := range c.Nodes {
		if n.Name == node {
			here = n.IP
		} else {
			other = n.IP
		}
	}
	if here == "" || other == "" {
		t.Fatalf("nodes %+v: want %s and another", c.Nodes, node)
	}
	return here, other
}

// kubernetesService is the API server's ClusterIP Service (default/kubernetes).
func kubernetesService(t *testing.T, k client.Client) string {
	t.Helper()
	var svc corev1.Service
	if err := k.Get(context.Background(), key("kubernetes"), &svc); err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, "443")
}

// envdHealth is the status of GET /health of the sandbox's envd from the
// host: a connection the node opens.
func envdHealth(t *testing.T, sbx *sandlotv1.Sandbox) int {
	t.Helper()
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + net.JoinHostPort(sbx.Status.PodIP, "49983") + "/health")
	if err != nil {
		t.Fatalf("envd of %s from the host: %v", sbx.Name, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
