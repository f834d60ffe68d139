package release

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// agentGauges: the agent of hello's node reports hello's VM on its metrics
// port as the chart installs it (HTTPS to the agent pod, with a reader's
// token: the API server's pod proxy would not pass the token on):
// running, with CPU time and PSS from the real shim, each a value a VM
// that ran this long with this much memory could have.
func agentGauges(t *testing.T) {
	hello := sandboxOf(t, "hello")
	agent := agentPodOn(t, hello.Status.NodeName)
	port := 0
	for _, p := range agent.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			port = int(p.ContainerPort)
		}
	}
	hostPort := net.JoinHostPort(agent.Status.PodIP, strconv.Itoa(port))
	labels := fmt.Sprintf(`{namespace="%s",pod="%s",sandbox="hello"}`, ns, hello.Status.PodName)
	poll.Eventually(t, time.Minute, "hello's gauges on its node's agent", func() error {
		page, err := scrape(t, hostPort)
		if err != nil {
			return err
		}
		if running, err := sample(page, "sandlot_sandbox_running"+labels); err != nil || running != 1 {
			return fmt.Errorf("sandlot_sandbox_running %v (%v), want 1", running, err)
		}
		cpu, err := sample(page, "sandlot_sandbox_cpu_seconds_total"+labels)
		if err != nil {
			return err
		}
		pss, err := sample(page, "sandlot_sandbox_memory_pss_bytes"+labels)
		if err != nil {
			return err
		}
		return plausibleGauges(hello, cpu, pss)
	})
}

// plausibleGauges: the VM has used CPU, no more than all of the host's
// cores since the sandbox was created; its PSS is over 1 MiB (a running
// guest's) and under its memory plus 2 GiB (QEMU's own): not a count in
// another unit.
func plausibleGauges(s *sandlotv1.Sandbox, cpu, pss float64) error {
	maxCPU := time.Since(s.CreationTimestamp.Time).Seconds() * float64(runtime.NumCPU())
	if cpu <= 0 || cpu > maxCPU {
		return fmt.Errorf("sandlot_sandbox_cpu_seconds_total %v, want more than 0 and at most %.0f (%d cores since its creation)",
			cpu, maxCPU, runtime.NumCPU())
	}
	if s.Status.Resources == nil {
		return fmt.Errorf("sandbox %s has no resources in its status", s.Name)
	}
	maxPSS := float64(int64(s.Status.Resources.MemoryMiB)<<20 + 2<<30)
	if pss <= 1<<20 || pss > maxPSS {
		return fmt.Errorf("sandlot_sandbox_memory_pss_bytes %v, want more than 1 MiB and at most %.0f (its %d MiB and 2 GiB)",
			pss, maxPSS, s.Status.Resources.MemoryMiB)
	}
	return nil
}

// sample is the value of one series (a metric name and its labels) in a
// Prometheus text page.
func sample(page, series string) (float64, error) {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("metrics line %q: %w", l, err)
			}
			return f, nil
		}
	}
	return 0, fmt.Errorf("no %s in the agent's metrics", series)
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
