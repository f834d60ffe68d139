package soak

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// fault breaks one part and returns once that part is back.
type fault struct {
	name   string
	inject func(ctx context.Context) error
}

// hold is how long a stopped process (MinIO, a kubelet) stays down: the
// fault's length, not a wait for anything.
const hold = 20 * time.Second

// faults is the schedule's cycle: the short form's four, then the long
// form's others.
func faults(c *cluster.Cluster, long bool) []fault {
	n0, n1 := c.Nodes[0].Name, c.Nodes[1].Name
	fs := []fault{
		{"agent pod deleted (" + n1 + ")", func(context.Context) error { return c.ReplaceAgentPod(n1) }},
		{"controller pod deleted", func(ctx context.Context) error { return replacePods(ctx, c, "sandlot-controller") }},
		{"MinIO down", func(context.Context) error { return minioDown(c) }},
		{"API pod deleted", func(ctx context.Context) error { return replacePods(ctx, c, "sandlot-api") }},
	}
	if long {
		fs = append(fs,
			fault{"agent killed (" + n0 + ")", func(context.Context) error { return c.KillAgent(n0) }},
			fault{"containerd restarted (" + n1 + ")", func(context.Context) error { return c.RestartContainerd(n1) }},
			fault{"kubelet down (" + n0 + ")", func(context.Context) error { return kubeletDown(c, n0) }},
		)
	}
	return fs
}

func minioDown(c *cluster.Cluster) error {
	c.MinIOServer.Stop()
	time.Sleep(hold)
	c.MinIOServer.Restart()
	return nil
}

func kubeletDown(c *cluster.Cluster, node string) error {
	if err := c.KillKubelet(node); err != nil {
		return err
	}
	time.Sleep(hold)
	return c.RestartKubelet(node)
}

// replacePods deletes a pod of a Deployment, as an eviction would, and
// returns once a new one is Ready.
func replacePods(ctx context.Context, c *cluster.Cluster, deployment string) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	ns := cluster.ReleaseNamespace
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	sel := labels.Set(d.Spec.Selector.MatchLabels).String()
	old, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	if len(old.Items) == 0 {
		return fmt.Errorf("no %s pod", deployment)
	}
	// One pod, as an eviction or a crash takes one: with more replicas
	// the others serve meanwhile.
	victim := old.Items[0]
	if err := cs.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete %s: %w", victim.Name, err)
	}
	gone := map[string]bool{}
	for _, p := range old.Items {
		gone[string(p.UID)] = true
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	return poll.Until(ctx, "a new "+deployment+" pod Ready", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if !gone[string(p.UID)] && p.DeletionTimestamp == nil && ready(&p) {
				return nil
			}
		}
		return fmt.Errorf("%d pods, none new and Ready", len(pods.Items))
	})
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// schedule injects fault i at t0 + (i+1)·every (at once when the one
// before ran past that), until ctx ends; each window goes to the ledger.
func schedule(ctx context.Context, fs []fault, t0 time.Time, every time.Duration, led *ledger, logf func(string, ...any)) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(t0.Add(time.Duration(i+1) * every))):
		}
		f := fs[i%len(fs)]
		w := window{fault: f.name, start: time.Now()}
		logf("fault: %s", f.name)
		if err := f.inject(context.WithoutCancel(ctx)); err != nil {
			w.err = err.Error()
			logf("fault %s: %v", f.name, err)
		}
		w.end = time.Now()
		led.fault(w)
		logf("fault: %s over after %s", f.name, w.end.Sub(w.start).Round(time.Second))
	}
}
