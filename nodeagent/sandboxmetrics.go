package nodeagent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Per-sandbox gauges on the agent's metrics endpoint, read from each VM's
// shim at scrape time (its QEMU as the host sees it: CPU time, PSS and
// private memory, running or not), for every sandbox pod on this node.
// What the guest says of itself is the E2B metrics route's (envd keeps it).
var (
	sandboxLabels  = []string{"namespace", "sandbox", "pod"}
	sandboxCPU     = prometheus.NewDesc("sandlot_sandbox_cpu_seconds_total", "CPU time of the sandbox's VM (its QEMU) on this node.", sandboxLabels, nil)
	sandboxPSS     = prometheus.NewDesc("sandlot_sandbox_memory_pss_bytes", "Proportional set size of the sandbox's VM: shared snapshot pages divided among the VMs mapping them.", sandboxLabels, nil)
	sandboxPrivate = prometheus.NewDesc("sandlot_sandbox_memory_private_bytes", "Memory only the sandbox's VM holds (what deleting it frees).", sandboxLabels, nil)
	sandboxRunning = prometheus.NewDesc("sandlot_sandbox_running", "1 while the sandbox's VM runs, 0 while it is paused or stopped.", sandboxLabels, nil)
)

// statsTimeout bounds one VM's answer during a scrape; statsWorkers is how
// many VMs are asked at once.
const (
	statsTimeout = 2 * time.Second
	statsWorkers = 8
)

// sandboxCollector is a prometheus.Collector over the node's sandbox pods.
type sandboxCollector struct {
	pods client.Reader // the agent's cache: pods of this node
	node Node
}

// NewSandboxCollector collects the gauges of n's sandbox pods listed by
// pods. Setup registers one on the agent's metrics registry.
func NewSandboxCollector(pods client.Reader, n Node) prometheus.Collector {
	return &sandboxCollector{pods: pods, node: n}
}

// registerSandboxCollector registers the node's collector; a process that
// runs several agents (the tests) keeps the first one's.
func registerSandboxCollector(pods client.Reader, n Node) error {
	err := metrics.Registry.Register(NewSandboxCollector(pods, n))
	if errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return nil
	}
	return err
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxCPU, sandboxPSS, sandboxPrivate, sandboxRunning} {
		ch <- d
	}
}

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list := &corev1.PodList{}
	if err := c.pods.List(ctx, list, client.HasLabels{sandlotv1.LabelSandbox}); err != nil {
		return
	}
	work := make(chan *corev1.Pod)
	var wg sync.WaitGroup
	for range statsWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pod := range work {
				c.collectPod(ctx, pod, ch)
			}
		}()
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Spec.NodeName == c.node.Name && p.Labels[sandlotv1.LabelSandbox] != "" &&
			p.Status.Phase == corev1.PodRunning {
			work <- p
		}
	}
	close(work)
	wg.Wait()
}

// collectPod emits one sandbox's gauges; a VM that does not answer in
// time is left out of this scrape.
func (c *sandboxCollector) collectPod(ctx context.Context, pod *corev1.Pod, ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	ctl, err := c.node.dial(ctx, string(pod.UID))
	if err != nil {
		return
	}
	defer ctl.Close()
	st, err := ctl.Stats(ctx, &controlapi.StatsRequest{})
	if err != nil {
		return
	}
	labels := []string{pod.Namespace, pod.Labels[sandlotv1.LabelSandbox], pod.Name}
	running := 0.0
	if st.GetState() == "Running" {
		running = 1
	}
	ch <- prometheus.MustNewConstMetric(sandboxCPU, prometheus.CounterValue, float64(st.GetCpuNanos())/1e9, labels...)
	ch <- prometheus.MustNewConstMetric(sandboxPSS, prometheus.GaugeValue, float64(st.GetPssBytes()), labels...)
	ch <- prometheus.MustNewConstMetric(sandboxPrivate, prometheus.GaugeValue, float64(st.GetPrivateBytes()), labels...)
	ch <- prometheus.MustNewConstMetric(sandboxRunning, prometheus.GaugeValue, running, labels...)
}
