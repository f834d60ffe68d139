// Package sbxbench holds what the cluster benchmarks (test/bench/agent,
// test/bench/lifecycle) do with sandboxes: a client whose rate limit does
// not queue a hundred watchers, watches that wait for an object's state,
// and a sandbox timed from its Create until it runs and envd answers.
package sbxbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/go-logr/logr"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
)

// Lifetime outlives a run: no sandbox expires mid-row.
const Lifetime = 4 * 3600

// rewatch is the wait before a closed watch is reopened.
const rewatch = 50 * time.Millisecond

// StartCluster builds sandlot and starts a cluster of nodes for a
// benchmark under a fresh /var/tmp directory (gone with t's cleanups);
// configure may add to its options (a store) first. It returns the
// cluster and a client for it.
func StartCluster(t crienv.T, nodes int, configure func(dir string, o *cluster.Options)) (*cluster.Cluster, client.WithWatch) {
	ctrllog.SetLogger(logr.Discard())
	// Short: node directories hold the shims' unix sockets.
	dir, err := os.MkdirTemp("/var/tmp", "sb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("SANDLOT_E2E_KEEP") != "" {
			fmt.Fprintf(os.Stderr, "kept %s (SANDLOT_E2E_KEEP)\n", dir)
			return
		}
		os.RemoveAll(dir)
	})
	o := cluster.Options{Dir: filepath.Join(dir, "c"), Nodes: nodes, BinDir: filepath.Join(dir, "bin"),
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
	if err := cluster.Build(o.BinDir); err != nil {
		t.Fatal(err)
	}
	if err := cluster.BuildImages(o.BinDir); err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(dir, &o)
	}
	c := cluster.Start(t, o)
	return c, NewClient(t, c)
}

// NewClient raises the rate limit: many sandboxes watched and polled at
// once must not queue behind the client's default 5 QPS.
func NewClient(t crienv.T, c *cluster.Cluster) client.WithWatch {
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	_ = nodev1.AddToScheme(scheme) // the RuntimeClass a benchmark may adjust
	_ = sandlotv1.AddToScheme(scheme)
	k, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Meta names an object in the default namespace.
func Meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "default"} }

// Sandboxes and Snapshots are the named objects, for deletion.
func Sandboxes(names []string) []client.Object {
	out := make([]client.Object, len(names))
	for i, n := range names {
		out[i] = &sandlotv1.Sandbox{ObjectMeta: Meta(n)}
	}
	return out
}

func Snapshots(names []string) []client.Object {
	out := make([]client.Object, len(names))
	for i, n := range names {
		out[i] = &sandlotv1.Snapshot{ObjectMeta: Meta(n)}
	}
	return out
}

// ParseLevels reads a comma-separated list of levels, each at least 1.
func ParseLevels(flag, s string) ([]int, error) {
	var cs []int
	for _, f := range strings.Split(s, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return nil, fmt.Errorf("-%s: %q is not a level of at least 1", flag, f)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// Start creates a sandbox from src and returns it once it runs and
// answers, with the time from the Create.
func Start(ctx context.Context, k client.WithWatch, name string, src sandlotv1.SandboxSource) (*sandlotv1.Sandbox, time.Duration, error) {
	sbx := &sandlotv1.Sandbox{ObjectMeta: Meta(name),
		Spec: sandlotv1.SandboxSpec{Source: src, TimeoutSeconds: ptr.To[int32](Lifetime)}}
	began := time.Now()
	if err := k.Create(ctx, sbx); err != nil {
		return nil, 0, err
	}
	s, err := Running(ctx, k, name)
	return s, time.Since(began), err
}

// Running waits for phase Running with a pod IP and for envd's /health to
// answer there: when a user can use the sandbox.
func Running(ctx context.Context, k client.WithWatch, name string) (*sandlotv1.Sandbox, error) {
	var sbx *sandlotv1.Sandbox
	err := Until(ctx, k, &sandlotv1.SandboxList{}, name, func(s *sandlotv1.Sandbox) (bool, error) {
		sbx = s
		if err := Ended(s); err != nil {
			return false, err
		}
		return s.Status.Phase == sandlotv1.SandboxRunning && s.Status.PodIP != "", nil
	})
	if err != nil && sbx != nil {
		err = fmt.Errorf("%w (last seen: %s, %s: %s)", err, sbx.Status.Phase, sbx.Status.Reason, sbx.Status.Message)
	}
	if err != nil {
		return nil, err
	}
	return sbx, crienv.WaitHTTP(ctx, fmt.Sprintf("http://%s:%d/health", sbx.Status.PodIP, sandlotv1.EnvdPort))
}

// Ended is an error for a sandbox in a terminal phase.
func Ended(s *sandlotv1.Sandbox) error {
	if s.Status.Phase.Terminal() {
		return fmt.Errorf("sandbox %s %s: %s: %s", s.Name, s.Status.Phase, s.Status.Reason, s.Status.Message)
	}
	return nil
}

// Until watches the named object in the default namespace until done says
// so (or fails): each event is timed when it is seen. A watch starts with
// the current state; a closed one is reopened.
func Until[O client.Object](ctx context.Context, k client.WithWatch, list client.ObjectList, name string,
	done func(O) (bool, error)) error {
	for ctx.Err() == nil {
		w, err := k.Watch(ctx, list, client.InNamespace("default"), client.MatchingFields{"metadata.name": name})
		if err != nil {
			return fmt.Errorf("watch %s: %w", name, err)
		}
		finished, err := drain(w, name, done)
		w.Stop()
		if finished {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(rewatch):
		}
	}
	return fmt.Errorf("%s: %w", name, ctx.Err())
}

// drain reads one watch until done is satisfied or fails (finished) or the
// watch closes.
func drain[O client.Object](w watch.Interface, name string, done func(O) (bool, error)) (finished bool, err error) {
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			return true, fmt.Errorf("%s was deleted", name)
		}
		o, ok := ev.Object.(O)
		if !ok { // an Error event: the watch closes and is reopened
			continue
		}
		if ok, err := done(o); ok || err != nil {
			return true, err
		}
	}
	return false, nil
}
