package release

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/test/cluster"
	"github.com/sandlot-dev/sandlot/test/poll"
)

// agentGauges: the agent of hello's node reports hello's VM on its metrics
// port as the chart installs it (read through the API server's pod proxy):
// running, with CPU time and PSS from the real shim.
func agentGauges(t *testing.T) {
	hello := sandboxOf(t, "hello")
	agent := agentPodOn(t, hello.Status.NodeName)
	port := 0
	for _, p := range agent.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			port = int(p.ContainerPort)
		}
	}
	path := fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy/metrics", cluster.ReleaseNamespace, agent.Name, port)
	labels := fmt.Sprintf(`{namespace="%s",pod="%s",sandbox="hello"}`, ns, hello.Status.PodName)
	poll.Eventually(t, time.Minute, "hello's gauges on its node's agent", func() error {
		out := kubectl(t, "get", "--raw", path)
		for _, want := range []string{"sandlot_sandbox_running" + labels + " 1", "sandlot_sandbox_cpu_seconds_total" + labels,
			"sandlot_sandbox_memory_pss_bytes" + labels} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in the agent's metrics", want)
			}
		}
		return nil
	})
}

// agentPodOn is the sandlot-agent pod on node.
func agentPodOn(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := e.k.List(context.Background(), pods, client.InNamespace(cluster.ReleaseNamespace),
		client.MatchingLabels{"app.kubernetes.io/name": "sandlot-agent"}); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName == node {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no sandlot-agent pod on node %s", node)
	return nil
}
