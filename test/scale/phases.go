package scale

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// ramp creates o.Sandboxes at o.Rate and waits until all run.
func (r *run) ramp(ctx context.Context, rep *Report) error {
	return r.phase(ctx, "ramp", rep, func(ctx context.Context) (int, error) {
		_, err := r.paced(ctx, r.o.Sandboxes, r.create)
		return r.o.Sandboxes, err
	})
}

// steady keeps the count: each 1/Rate a delete of the oldest and a
// create, some of them with a pause and resume or a snapshot.
func (r *run) steady(ctx context.Context, rep *Report) error {
	n := int(r.o.Steady.Seconds() * r.o.Rate)
	if n == 0 {
		return nil
	}
	return r.phase(ctx, "steady", rep, func(ctx context.Context) (int, error) {
		var ops atomic.Int64
		every := func(share float64) int64 { return int64(math.Round(1 / max(share, 1e-9))) }
		_, err := r.paced(ctx, n, func(ctx context.Context) error {
			if err := r.deleteOldest(ctx); err != nil {
				return err
			}
			if err := r.create(ctx); err != nil {
				return err
			}
			// Spread evenly, not drawn: the shares hold in short runs too.
			switch i := ops.Add(1); {
			case r.o.PauseShare > 0 && i%every(r.o.PauseShare) == 0:
				rep.paused.Add(1)
				return r.pauseAndResume(ctx)
			case r.o.SnapshotShare > 0 && i%every(r.o.SnapshotShare) == 1:
				rep.snapshots.Add(1)
				return r.snapshot(ctx)
			}
			return nil
		})
		return n, err
	})
}

// phase runs a phase that creates sandboxes, waits until they all run,
// and reports its latencies and what the control plane spent on it.
func (r *run) phase(ctx context.Context, name string, rep *Report, do func(context.Context) (int, error)) error {
	before, err := r.e.snapshotCosts(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	first := r.next
	r.mu.Unlock()
	began := time.Now()
	creates, err := do(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	issued := time.Since(began)
	names := make([]string, 0, creates)
	for i := first; i < first+creates; i++ {
		names = append(names, fmt.Sprintf("s-%06d", i))
	}
	err = poll.Within(r.o.wait(), fmt.Sprintf("%s: %d sandboxes Running", name, creates), func() error {
		if n := r.rec.runningCount(names); n < creates-r.deletedAmong(names) {
			return fmt.Errorf("%d Running", n)
		}
		return nil
	})
	after, cerr := r.e.snapshotCosts(ctx)
	if cerr != nil {
		return cerr
	}
	p := PhaseReport{Name: name, Creates: creates, Issued: issued, AllRunning: time.Since(began), Costs: after.minus(before)}
	p.ToPod, p.ToRunning, p.NoPod, p.NotRunning = r.rec.latencies(names)
	rep.Phases = append(rep.Phases, p)
	fmt.Fprintf(r.o.Log, "# %s: %d creates issued in %v, all Running after %v\n", name, creates, issued.Round(time.Millisecond),
		p.AllRunning.Round(time.Millisecond))
	return err
}

// deleteOldest deletes the oldest live sandbox.
func (r *run) deleteOldest(ctx context.Context) error {
	r.mu.Lock()
	if len(r.live) == 0 {
		r.mu.Unlock()
		return nil
	}
	name := r.live[0]
	r.live = r.live[1:]
	r.mu.Unlock()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}}
	if err := r.e.Admin.Delete(ctx, sbx); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete sandbox %s: %w", name, err)
	}
	r.mu.Lock()
	r.deleted[name] = true
	r.mu.Unlock()
	return nil
}

// deletedAmong counts names the churn deleted.
func (r *run) deletedAmong(names []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range names {
		if r.deleted[s] {
			n++
		}
	}
	return n
}

// randomLive is a live sandbox of the older half (the churn deletes
// the oldest first: these outlive a pause).
func (r *run) randomLive() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.live) < 4 {
		return ""
	}
	return r.live[len(r.live)/2+rand.IntN(len(r.live)/2)]
}

// pauseAndResume pauses a live sandbox and, in the background, resumes it
// once it is Paused.
func (r *run) pauseAndResume(ctx context.Context) error {
	name := r.randomLive()
	if name == "" {
		return nil
	}
	key := client.ObjectKey{Namespace: Namespace, Name: name}
	if err := r.setPaused(ctx, key, true); err != nil {
		return err
	}
	go func() {
		// Read from the fleet's cache: polling the API server here was 13
		// GETs per create of the churn, load of the bench's own.
		_ = poll.Within(2*time.Minute, "sandbox "+name+" Paused", func() error {
			sbx := &sandlotv1.Sandbox{}
			if err := r.fleet.cache.Get(ctx, key, sbx); err != nil {
				return client.IgnoreNotFound(err)
			}
			if sbx.Status.Phase != sandlotv1.SandboxPaused {
				return fmt.Errorf("phase %s", sbx.Status.Phase)
			}
			return nil
		})
		_ = r.setPaused(ctx, key, false)
	}()
	return nil
}

func (r *run) setPaused(ctx context.Context, key client.ObjectKey, paused bool) error {
	sbx := &sandlotv1.Sandbox{}
	if err := r.fleet.cache.Get(ctx, key, sbx); err != nil { // the patch carries only spec.paused
		return client.IgnoreNotFound(err)
	}
	orig := sbx.DeepCopy()
	sbx.Spec.Paused = paused
	return client.IgnoreNotFound(r.e.Admin.Patch(ctx, sbx, client.MergeFrom(orig)))
}

// snapshot takes a Snapshot of a live sandbox.
func (r *run) snapshot(ctx context.Context) error {
	name := r.randomLive()
	if name == "" {
		return nil
	}
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Namespace: Namespace},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: name}}}
	return r.e.Admin.Create(ctx, snap)
}

// settle waits until every live sandbox is Running or Paused (the
// churn's last pauses and resumes done), and counts them.
func (r *run) settle(ctx context.Context, rep *Report) error {
	return poll.Within(r.o.wait(), "every live sandbox Running or Paused", func() error {
		list := &sandlotv1.SandboxList{}
		if err := r.e.Admin.List(ctx, list, client.InNamespace(Namespace)); err != nil {
			return err
		}
		settled := 0
		for _, s := range list.Items {
			if s.DeletionTimestamp == nil && (s.Status.Phase == sandlotv1.SandboxRunning || s.Status.Phase == sandlotv1.SandboxPaused) &&
				s.Spec.Paused == (s.Status.Phase == sandlotv1.SandboxPaused) {
				settled++
			}
		}
		r.mu.Lock()
		live := len(r.live)
		r.mu.Unlock()
		if settled != live {
			return fmt.Errorf("%d of %d live sandboxes settled", settled, live)
		}
		return nil
	})
}
