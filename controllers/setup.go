package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/data"
	"github.com/sandlot-dev/sandlot/controllers/drain"
	"github.com/sandlot-dev/sandlot/controllers/index"
	"github.com/sandlot-dev/sandlot/controllers/metrics"
	"github.com/sandlot-dev/sandlot/controllers/placement"
	"github.com/sandlot-dev/sandlot/controllers/sandbox"
	"github.com/sandlot-dev/sandlot/controllers/template"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// CacheOptions keeps the controller's caches to sandlot's own pods and
// secrets: it never needs the rest of a cluster's. Cached objects drop
// their managedFields, which the controller never reads (an update sent
// without them keeps the stored ones).
func CacheOptions() cache.Options {
	owned, _ := labels.NewRequirement(sandlotv1.LabelSandbox, selection.Exists, nil)
	sel := labels.NewSelector().Add(*owned)
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:    {Label: sel},
		&corev1.Secret{}: {Label: sel},
	}}
}

// Options tune the reconcilers.
type Options struct {
	// SandboxWorkers is how many Sandboxes are reconciled concurrently.
	SandboxWorkers int
	// MilliCPUPerVCPU is the CPU a sandbox pod requests per vCPU (0: 1000).
	MilliCPUPerVCPU int64
	// SnapshotExpiry and PausedExpiry delete Snapshots (that set no expiry
	// of their own) and pause packages that long after their creation
	// (0: never).
	SnapshotExpiry, PausedExpiry time.Duration
	// SlotsPerNode is each template's start slots per node unless its
	// spec.slots says (0: none).
	SlotsPerNode int
	// SharedStore: the node agents' store is shared (s3, juicefs), so a
	// drain moves sandboxes (pause here, resume elsewhere); with a local
	// store a drain waits for them.
	SharedStore bool
	// ImagePullPolicy of every sandlot pod ("": IfNotPresent): Always
	// checks the pod's pull Secrets with the registry at each start,
	// Never runs only images the operator imported.
	ImagePullPolicy corev1.PullPolicy
}

// DefaultSandboxWorkers: sandbox reconciles mostly wait on the API
// server, so several run at once; placement itself is serialised. At
// fleet size (bench-scale, 3,000 over 300 nodes) 8 workers sustained 19
// creates/s, 32 sustained 27/s, 64 no more (the API server saturated).
const DefaultSandboxWorkers = 32

// SetupAll registers every reconciler and index with the manager.
func SetupAll(mgr ctrl.Manager, opts Options) error {
	if err := index.Setup(context.Background(), mgr); err != nil {
		return err
	}
	if opts.SandboxWorkers <= 0 {
		opts.SandboxWorkers = DefaultSandboxWorkers
	}
	if opts.MilliCPUPerVCPU <= 0 {
		opts.MilliCPUPerVCPU = 1000
	}
	c, r, rec := mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(writes.EventSource)
	metrics.ReadStateFrom(c)
	holds := &placement.Holds{}
	if err := (&sandbox.Reconciler{Client: c, Recorder: rec, APIReader: r, Workers: opts.SandboxWorkers, MilliCPUPerVCPU: opts.MilliCPUPerVCPU,
		PausedExpiry: opts.PausedExpiry, Scheduler: &placement.Scheduler{Holds: holds}, ImagePullPolicy: opts.ImagePullPolicy}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&drain.Reconciler{Client: c, Recorder: rec, SharedStore: opts.SharedStore}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&template.Reconciler{Client: c, Recorder: rec, MilliCPUPerVCPU: opts.MilliCPUPerVCPU, SlotsPerNode: opts.SlotsPerNode,
		Holds: holds, ImagePullPolicy: opts.ImagePullPolicy}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&data.SnapshotReconciler{Client: c, Recorder: rec, APIReader: r, DefaultExpiry: opts.SnapshotExpiry}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&data.PausedSandboxReconciler{Client: c, Recorder: rec, APIReader: r}).SetupWithManager(mgr)
}
