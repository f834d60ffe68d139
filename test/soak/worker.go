package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// worker churns: one sandbox at a time, created, given a file, checked,
// put through one lifecycle operation, and killed.
type worker struct {
	n        int
	e        *e2b
	kube     *kubeOps
	template string
	led      *ledger
	rng      *rand.Rand
	orphans  chan<- string // sandboxes and snapshots a failed kill left
	seq      int
	snaps    []string // this cycle's snapshots, deleted after its sandbox
	failures int      // this cycle's
	backoff  time.Duration
}

// errLost marks a check that found the state gone.
var errLost = errors.New("state lost")

// do runs one operation and records it. A 404 for a sandbox the worker
// holds, or a failed check, is lost; any other error failed.
func (w *worker) do(ctx context.Context, op, sandbox string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	r := record{op: op, sandbox: sandbox, start: time.Now(), outcome: ok}
	err := fn(ctx)
	r.end = time.Now()
	var ae *apiError
	switch {
	case err == nil:
	case errors.Is(err, errLost), errors.As(err, &ae) && ae.code == http.StatusNotFound:
		r.outcome, r.reason = lost, err.Error()
	default:
		r.outcome, r.reason = failed, err.Error()
	}
	w.led.add(r)
	if r.outcome != ok {
		w.failures++
		sbxtest.Logf("soak: %s of %s %s after %s: %s", op, sandbox, r.outcome, r.end.Sub(r.start).Round(time.Millisecond), r.reason)
	}
	return err
}

// check runs cat on the sandbox's file: a different content is lost.
func (w *worker) check(ctx context.Context, b box, want string) error {
	got, err := w.e.run(ctx, b, "cat /tmp/soak")
	if err != nil {
		if strings.Contains(err.Error(), "No such file") {
			return fmt.Errorf("%w: /tmp/soak is gone: %v", errLost, err)
		}
		return err
	}
	if strings.TrimSpace(got) != want {
		return fmt.Errorf("%w: /tmp/soak holds %q, want %q", errLost, got, want)
	}
	return nil
}

// loop runs cycles until the run is over. After a cycle that failed the
// worker backs off (1 s, doubling to 8 s) as an SDK user's retry does:
// without it a failing create repeats thousands of times a minute.
func (w *worker) loop(until time.Time) {
	for time.Now().Before(until) {
		w.failures = 0
		w.cycle(context.Background())
		if w.failures == 0 {
			w.backoff = 0
			continue
		}
		w.backoff = min(8*time.Second, max(time.Second, 2*w.backoff))
		time.Sleep(w.backoff)
	}
}

// cycle is one sandbox's life.
func (w *worker) cycle(ctx context.Context) {
	var b box
	err := w.do(ctx, "create", "", func(ctx context.Context) error {
		var err error
		if b, err = w.e.create(ctx, w.template); err != nil {
			return err
		}
		_, err = w.e.run(ctx, b, "true") // a create ends when the first command answers
		return err
	})
	if b.id == "" {
		return
	}
	defer func() {
		w.kill(ctx, b)
		for _, snap := range w.snaps { // after the sandbox that may use them
			w.dropSnapshot(ctx, snap)
		}
		w.snaps = nil
	}()
	if err != nil {
		return
	}
	w.seq++
	content := fmt.Sprintf("w%d-%d-%x", w.n, w.seq, w.rng.Uint32())
	if w.do(ctx, "write", b.id, func(ctx context.Context) error { return w.e.write(ctx, b, "/tmp/soak", content) }) != nil {
		return
	}
	if w.do(ctx, "command", b.id, func(ctx context.Context) error { return w.check(ctx, b, content) }) != nil {
		return
	}
	steps := []func(context.Context, box, string){w.pauseResume, w.kubectlPause, w.snapshotRestore, w.forkOne, w.rollbackOne}
	steps[w.rng.IntN(len(steps))](ctx, b, content)
}

// kill ends b; one the API could not kill is left for the cleanup.
func (w *worker) kill(ctx context.Context, b box) {
	if w.do(context.WithoutCancel(ctx), "kill", b.id, func(ctx context.Context) error { return w.e.kill(ctx, b.id) }) != nil {
		w.orphans <- "sandbox/" + b.id
	}
}

// pauseResume: E2B's pause, then connect (which resumes), the file kept.
func (w *worker) pauseResume(ctx context.Context, b box, content string) {
	if w.do(ctx, "pause", b.id, func(ctx context.Context) error { return w.e.pause(ctx, b.id) }) != nil {
		return
	}
	w.resumed(ctx, b, content, "resume", func(ctx context.Context) error { return w.e.connect(ctx, b.id) })
}

// kubectlPause: `kubectl sandlot pause --wait`, then resume.
func (w *worker) kubectlPause(ctx context.Context, b box, content string) {
	if w.do(ctx, "kubectl pause", b.id, func(ctx context.Context) error { return w.kube.pluginVerb(ctx, "pause", b.id) }) != nil {
		return
	}
	w.resumed(ctx, b, content, "kubectl resume", func(ctx context.Context) error { return w.kube.pluginVerb(ctx, "resume", b.id) })
}

// resumed runs a resume and checks the file came back with the sandbox.
func (w *worker) resumed(ctx context.Context, b box, content, op string, resume func(context.Context) error) {
	_ = w.do(ctx, op, b.id, func(ctx context.Context) error {
		if err := resume(ctx); err != nil {
			return err
		}
		return w.check(ctx, b, content)
	})
}

// snapshotRestore: a snapshot, a sandbox from it holding the file, the
// snapshot deleted (E2B's delete) after that sandbox is killed.
func (w *worker) snapshotRestore(ctx context.Context, b box, content string) {
	snap, ok := w.snapshot(ctx, b)
	if !ok {
		return
	}
	w.child(ctx, "create from snapshot", b.id, content, func(ctx context.Context) (box, error) { return w.e.create(ctx, snap) })
}

// forkOne: a fork holding the file; its snapshot deleted with kubectl.
func (w *worker) forkOne(ctx context.Context, b box, content string) {
	w.child(ctx, "fork", b.id, content, func(ctx context.Context) (box, error) { return w.e.fork(ctx, b.id) })
	_ = w.do(ctx, "kubectl delete snapshot", b.id, func(ctx context.Context) error { return w.kube.deleteSnapshotsOf(ctx, b.id) })
}

// child starts a sandbox from b's state, checks the file there, kills it.
func (w *worker) child(ctx context.Context, op, parent, content string, start func(context.Context) (box, error)) {
	var kid box
	_ = w.do(ctx, op, parent, func(ctx context.Context) error {
		var err error
		if kid, err = start(ctx); err != nil {
			return err
		}
		return w.check(ctx, kid, content)
	})
	if kid.id != "" {
		w.kill(ctx, kid)
	}
}

// snapshot takes one of b (deleted after the cycle's sandbox).
func (w *worker) snapshot(ctx context.Context, b box) (string, bool) {
	var snap string
	if w.do(ctx, "snapshot", b.id, func(ctx context.Context) error {
		var err error
		snap, err = w.e.snapshot(ctx, b.id)
		return err
	}) != nil {
		return "", false
	}
	w.snaps = append(w.snaps, snap)
	return snap, true
}

// rollbackOne: a snapshot, the file changed, a rollback to the snapshot
// brings the old content back.
func (w *worker) rollbackOne(ctx context.Context, b box, content string) {
	snap, ok := w.snapshot(ctx, b)
	if !ok {
		return
	}
	if w.do(ctx, "write", b.id, func(ctx context.Context) error { return w.e.write(ctx, b, "/tmp/soak", "changed") }) != nil {
		return
	}
	_ = w.do(ctx, "rollback", b.id, func(ctx context.Context) error {
		if err := w.e.rollback(ctx, b.id, snap); err != nil {
			return err
		}
		return w.check(ctx, b, content)
	})
}

// dropSnapshot deletes a snapshot through the E2B API; one it could not
// delete is left for the cleanup.
func (w *worker) dropSnapshot(ctx context.Context, snap string) {
	if w.do(context.WithoutCancel(ctx), "delete snapshot", snap, func(ctx context.Context) error { return w.e.deleteSnapshot(ctx, snap) }) != nil {
		w.orphans <- "snapshot/" + snap
	}
}
