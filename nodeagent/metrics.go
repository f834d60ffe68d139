package nodeagent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// The agent's metrics, on controller-runtime's registry (served on
// --metrics-bind-address). kind is Snapshot or PausedSandbox.
var (
	dataSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandlot_agent_snapshot_seconds",
		Help:    "From a Snapshot's or PausedSandbox's creation until its data is Ready on its node.",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 12), // 100 ms .. ~200 s
	}, []string{"kind"})
	dataBytes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandlot_agent_snapshot_bytes",
		Help:    "Bytes a Snapshot's or PausedSandbox's data holds (sparse files count their data).",
		Buckets: prometheus.ExponentialBuckets(1<<20, 4, 10), // 1 MiB .. 256 GiB
	}, []string{"kind"})
	remoteReadySeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandlot_agent_remote_ready_seconds",
		Help:    "From data Ready on its node until another node may restore it (remoteStatus Ready).",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 14),
	}, []string{"kind"})
	remoteReadyBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_agent_remote_ready_bytes_total",
		Help: "Bytes of data made restorable on other nodes (the data's size when its remote status turns Ready): the upload throughput.",
	}, []string{"kind"})
	restoreSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sandlot_agent_restore_seconds",
		Help: "Restores on this node until the VM runs: start (a pod's restore, from the pod's creation), " +
			"claim (a warm pool pod's resume and identity push), rollback (in place).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14), // 10 ms .. ~80 s
	}, []string{"start"})
)

// The agent's failure counters; their reason label is one of a known set
// (failures.go), never free text.
var (
	snapshotFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_agent_snapshot_failures_total",
		Help: "Snapshots and pause packages that failed on this node, by kind and reason (AgentRestarted, SandboxNotRunning, " +
			"ShimUnreachable, SnapshotFailed, StoreFailed; Other).",
	}, []string{"kind", "reason"})
	uploadFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_agent_upload_failures_total",
		Help: "Data whose upload to the shared store failed (remote status Failed: no other node can restore it), by kind and reason.",
	}, []string{"kind", "reason"})
	restoreFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandlot_agent_restore_failures_total",
		Help: "Restores whose data this node's agent did not hand to the shim, by reason (NotFound, Refused, " +
			"IntegrityCheckFailed, ManifestRejected, Error).",
	}, []string{"reason"})
)

func init() {
	metrics.Registry.MustRegister(dataSeconds, dataBytes, remoteReadySeconds, remoteReadyBytes, restoreSeconds,
		snapshotFailures, uploadFailures, restoreFailures)
}

// observeData records what a status change of data says: Ready (its
// duration and size) and remote Ready (the time after Ready).
func observeData(kind string, created metav1.Time, old, cur sandlotv1.DataStatus) {
	observeDataFailure(kind, old, cur)
	if old.Phase != sandlotv1.DataReady && cur.Phase == sandlotv1.DataReady && cur.CompletionTime != nil {
		dataSeconds.WithLabelValues(kind).Observe(cur.CompletionTime.Sub(created.Time).Seconds())
		dataBytes.WithLabelValues(kind).Observe(float64(cur.TotalBytes))
	}
	if old.RemoteStatus != sandlotv1.RemoteReady && cur.RemoteStatus == sandlotv1.RemoteReady &&
		cur.RemoteReadyTime != nil && cur.CompletionTime != nil {
		remoteReadySeconds.WithLabelValues(kind).Observe(cur.RemoteReadyTime.Sub(cur.CompletionTime.Time).Seconds())
		remoteReadyBytes.WithLabelValues(kind).Add(float64(cur.TotalBytes))
	}
}

func observeRestore(start string, took time.Duration) {
	restoreSeconds.WithLabelValues(start).Observe(took.Seconds())
}
