package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	miniogo "github.com/minio/minio-go/v7"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
)

const (
	// waitTimeout bounds one batch or one cleanup: ten TCG guests booting,
	// or uploading to MinIO, on two cores take minutes.
	waitTimeout = 10 * time.Minute
	// settle lets the controller's node cache see a cordon before the next
	// placement: it places from that cache, not from the API.
	settle = time.Second
)

// snapshot takes a Snapshot of a running sandbox and returns it with the
// time from the Create to phase Ready and, with a shared store, from there on to
// remote Ready (it waits for both; one watch sees both moments).
func (b *bench) snapshot(ctx context.Context, name, sandbox string) (*sandlotv1.Snapshot, time.Duration, time.Duration, error) {
	snap := &sandlotv1.Snapshot{ObjectMeta: sbxbench.Meta(name),
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: sandbox}}}
	began := time.Now()
	if err := b.k.Create(ctx, snap); err != nil {
		return nil, 0, 0, err
	}
	var readyAt, doneAt time.Time
	err := sbxbench.Until(ctx, b.k, &sandlotv1.SnapshotList{}, name, func(s *sandlotv1.Snapshot) (bool, error) {
		now := time.Now()
		snap = s
		if s.Status.Phase == sandlotv1.DataReady && readyAt.IsZero() {
			readyAt = now
		}
		doneAt = now
		return dataDone(name, &s.Status.DataStatus, b.shared)
	})
	return snap, readyAt.Sub(began), doneAt.Sub(readyAt), err
}

// dataDone says whether a Snapshot's or PausedSandbox's data is Ready (and
// remote Ready when remote), or why it never will be.
func dataDone(name string, st *sandlotv1.DataStatus, remote bool) (bool, error) {
	bad := st.Phase == sandlotv1.DataFailed || st.RemoteStatus == sandlotv1.RemoteFailed ||
		(remote && st.Phase == sandlotv1.DataReady && st.RemoteStatus == sandlotv1.RemoteNotApplicable)
	if bad {
		var why []string
		for _, c := range st.Conditions {
			why = append(why, c.Type+": "+c.Message)
		}
		return false, fmt.Errorf("%s: phase %s, remote %s: %v", name, st.Phase, st.RemoteStatus, why)
	}
	return st.Phase == sandlotv1.DataReady && (!remote || st.RemoteStatus == sandlotv1.RemoteReady), nil
}

// pauseTimes: from the spec.paused patch to phase Paused (the API's answer:
// the VM stopped and saved), to its pod gone, and how much longer after
// Paused the package took to be remote Ready (shared stores).
type pauseTimes struct{ paused, gone, remote time.Duration }

// pause sets spec.paused and waits for all of pauseTimes. The package is
// watched from the patch on, so one remote Ready before the pause
// completed counts as 0 more.
func (b *bench) pause(ctx context.Context, name string) (pauseTimes, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type seen struct {
		at  time.Time
		err error
	}
	pkg := make(chan seen, 1)
	if b.shared {
		go func() { at, err := b.packageRemoteReady(ctx, name); pkg <- seen{at, err} }()
	}
	pod, err := b.podOf(ctx, name)
	if err != nil {
		return pauseTimes{}, err
	}
	var d pauseTimes
	began := time.Now()
	if err := b.setPaused(ctx, name, true); err != nil {
		return d, err
	}
	if err := b.waitPaused(ctx, name); err != nil {
		return d, err
	}
	pausedAt := time.Now()
	d.paused = pausedAt.Sub(began)
	if err := sbxbench.Gone(ctx, b.k, pod); err != nil {
		return d, err
	}
	d.gone = time.Since(began)
	if !b.shared {
		return d, nil
	}
	r := <-pkg
	d.remote = max(0, r.at.Sub(pausedAt))
	return d, r.err
}

// packageRemoteReady returns when the PausedSandbox of that name (it need
// not exist yet) was seen Ready and remote Ready.
func (b *bench) packageRemoteReady(ctx context.Context, name string) (time.Time, error) {
	var at time.Time
	err := sbxbench.Until(ctx, b.k, &sandlotv1.PausedSandboxList{}, name, func(p *sandlotv1.PausedSandbox) (bool, error) {
		at = time.Now()
		return dataDone(name, &p.Status.DataStatus, true)
	})
	return at, err
}

// waitPaused: the controller reports Paused once the package is Ready
// (the agent stopped the VM before saving it). A failed pause leaves the
// sandbox Running with reason PauseFailed: an error, not a wait.
func (b *bench) waitPaused(ctx context.Context, name string) error {
	return sbxbench.Until(ctx, b.k, &sandlotv1.SandboxList{}, name, func(s *sandlotv1.Sandbox) (bool, error) {
		if s.Status.Reason == sandlotv1.ReasonPauseFailed {
			return false, fmt.Errorf("sandbox %s: pause failed: %s", name, s.Status.Message)
		}
		return s.Status.Phase == sandlotv1.SandboxPaused, sbxbench.Ended(s)
	})
}

// resume clears spec.paused and returns the sandbox once it runs and
// answers, with the time from the patch.
func (b *bench) resume(ctx context.Context, name string) (*sandlotv1.Sandbox, time.Duration, error) {
	began := time.Now()
	if err := b.setPaused(ctx, name, false); err != nil {
		return nil, 0, err
	}
	s, err := sbxbench.Running(ctx, b.k, name)
	return s, time.Since(began), err
}

func (b *bench) setPaused(ctx context.Context, name string, paused bool) error {
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"paused":%t}}`, paused))
	return b.k.Patch(ctx, &sandlotv1.Sandbox{ObjectMeta: sbxbench.Meta(name)}, patch)
}

// cordon marks a node (un)schedulable, which the controller's placement
// honours, and gives the controller a moment to see it.
func (b *bench) cordon(node string, on bool) {
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on))
	if err := b.k.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, patch); err != nil {
		b.t.Fatalf("cordon %s %t: %v", node, on, err)
	}
	time.Sleep(settle)
}

// remove deletes objects, a Sandbox with its pod and pause package, and
// waits until all are gone, so VMs and their data do not pile up between
// rows; it is never part of a measurement.
func (b *bench) remove(objs ...client.Object) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var wait []client.Object
	for _, o := range objs {
		if _, ok := o.(*sandlotv1.Sandbox); ok {
			// Its pod, read before the delete (a paused one has none).
			if pod, err := b.podOf(ctx, o.GetName()); err == nil {
				wait = append(wait, pod)
			}
			wait = append(wait, &sandlotv1.PausedSandbox{ObjectMeta: sbxbench.Meta(o.GetName())})
		}
		if err := b.k.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			b.t.Fatalf("cleanup: delete %s: %v", o.GetName(), err)
		}
		wait = append(wait, o)
	}
	for _, o := range wait {
		if err := sbxbench.Gone(ctx, b.k, o); err != nil {
			b.t.Fatalf("cleanup: %v", err)
		}
	}
}

// podOf is the pod a sandbox runs in, by the name its status gives: a
// pool pod or start slot it claimed is not named after it.
func (b *bench) podOf(ctx context.Context, sandbox string) (*corev1.Pod, error) {
	s := &sandlotv1.Sandbox{}
	if err := b.k.Get(ctx, client.ObjectKey{Namespace: "default", Name: sandbox}, s); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sandbox, err)
	}
	if s.Status.PodName == "" {
		return nil, fmt.Errorf("sandbox %s names no pod (phase %s)", sandbox, s.Status.Phase)
	}
	return &corev1.Pod{ObjectMeta: sbxbench.Meta(s.Status.PodName)}, nil
}

// putFloor (juicefs, c = 1) puts as many bytes as the snapshot's objects
// hold into MinIO in one PUT and returns how long it took: the upload
// time of its bytes at the object store's throughput, in the same run.
func (b *bench) putFloor(ctx context.Context, snap *sandlotv1.Snapshot) time.Duration {
	dir := b.mounts[snap.Status.NodeName]
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, "snapshots", string(snap.UID)), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		objs, err := store.JuiceFSObjects(ctx, p)
		seen := map[string]bool{}
		for _, o := range objs {
			if o.Key != "" && !seen[o.Key] {
				seen[o.Key], n = true, n+int64(o.Size)
			}
		}
		return err
	})
	if err != nil {
		b.t.Fatalf("objects of %s: %v", snap.Name, err)
	}
	began := time.Now()
	_, err = b.objectStore.Client().PutObject(ctx, b.objectStore.Bucket, "floor/"+snap.Name,
		io.LimitReader(rand.Reader, n), n, miniogo.PutObjectOptions{})
	if err != nil {
		b.t.Fatalf("PUT floor of %d bytes: %v", n, err)
	}
	d := time.Since(began)
	b.t.Logf("%s: %.1f MiB of objects; one PUT of as many bytes: %v", snap.Name, float64(n)/(1<<20), d)
	return d
}
