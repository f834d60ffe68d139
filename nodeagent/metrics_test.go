package nodeagent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestObserveData: a change to Ready counts once with its duration and
// size; remote Ready counts the time after Ready; nothing else counts.
func TestObserveData(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	done := metav1.NewTime(created.Add(1500 * time.Millisecond))
	remote := metav1.NewTime(done.Add(3 * time.Second))
	creating := sandlotv1.DataStatus{Phase: sandlotv1.DataCreating}
	ready := sandlotv1.DataStatus{Phase: sandlotv1.DataReady, CompletionTime: &done, TotalBytes: 64 << 20,
		RemoteStatus: sandlotv1.RemoteInProgress}
	remoteReady := ready
	remoteReady.RemoteStatus, remoteReady.RemoteReadyTime = sandlotv1.RemoteReady, &remote

	const kind = "TestKind"
	for _, step := range [][2]sandlotv1.DataStatus{{creating, creating}, {creating, ready}, {ready, ready},
		{ready, remoteReady}, {remoteReady, remoteReady}} {
		observeData(kind, created, step[0], step[1])
	}
	for _, tc := range []struct {
		name string
		vec  *prometheus.HistogramVec
		sum  float64
	}{
		{"snapshot seconds", dataSeconds, 1.5},
		{"snapshot bytes", dataBytes, 64 << 20},
		{"remote ready seconds", remoteReadySeconds, 3},
	} {
		h := histogram(t, tc.vec, kind)
		if h.GetSampleCount() != 1 || h.GetSampleSum() != tc.sum {
			t.Errorf("%s: %d samples, sum %v; want 1, %v", tc.name, h.GetSampleCount(), h.GetSampleSum(), tc.sum)
		}
	}
	if got := testutil.ToFloat64(remoteReadyBytes.WithLabelValues(kind)); got != 64<<20 {
		t.Errorf("remote ready bytes %v, want the data's 64 MiB once", got)
	}
}

func histogram(t *testing.T, vec *prometheus.HistogramVec, label string) *dto.Histogram {
	t.Helper()
	m := &dto.Metric{}
	if err := vec.WithLabelValues(label).(prometheus.Metric).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}
