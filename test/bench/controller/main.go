// Command controller benchmarks the controller's orchestration on a real
// kube-apiserver + etcd (envtest): how long from `create Sandbox` until its
// Pod exists, and from the Pod running until the Sandbox reports Running,
// at several concurrencies. The baseline in the same run is one raw API
// write seen by a watcher (a ConfigMap), the floor every hop pays.
//
//	make bench-controller   (KUBEBUILDER_ASSETS from make envtest-assets)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/kube"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	levels := flag.String("c", "1,10,50", "concurrency levels")
	samples := flag.Int("n", 60, "sandboxes measured per concurrency level (at least c)")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())

	env, err := kube.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := startManager(ctx, env); err != nil {
		return err
	}
	b := &bench{c: env.Client, wc: mustWatchClient(env)}
	if err := b.setup(ctx); err != nil {
		return err
	}
	fmt.Printf("# sandlot controller orchestration on envtest (kube-apiserver v1.37.2, etcd v3.6.16)\n")
	fmt.Printf("# no VM involved: accel n/a; host %s\n\n", host.Describe())
	fmt.Printf("%-34s %4s %5s %8s %8s %8s %8s\n", "measure", "c", "n", "min", "median", "p95", "max")
	if err := b.baselines(ctx, 50); err != nil {
		return err
	}
	for _, c := range parseLevels(*levels) {
		var toPod, toRunning []time.Duration
		for r := 0; r < max(*samples/c, 1); r++ {
			p, run, err := b.round(ctx, c, fmt.Sprintf("c%d-r%d", c, r))
			if err != nil {
				return err
			}
			toPod, toRunning = append(toPod, p...), append(toRunning, run...)
		}
		row("create Sandbox -> Pod exists", c, toPod)
		row("Pod Running -> Sandbox Running", c, toRunning)
	}
	fmt.Printf("\ncreate -> Pod is 3 sequential writes (finalizer, token Secret, Pod) plus queueing; quote it as a ratio to the baselines.\n")
	return nil
}

type bench struct {
	c  client.Client
	wc client.WithWatch
}

func (b *bench) setup(ctx context.Context) error {
	for _, ns := range []string{"bench"} {
		if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	key, err := sealed.NewKey() // as the node's agent publishes it: claims and builders' tokens are sealed to it
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bench-node", Labels: map[string]string{sandlotv1.LabelRuntime: "true"},
		Annotations: map[string]string{sandlotv1.AnnotationClaimKey: key.PublicBase64()}}}
	if err := b.c.Create(ctx, node); err != nil {
		return err
	}
	q := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("4Ti")}
	node.Status = corev1.NodeStatus{Capacity: q, Allocatable: q,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	if err := b.c.Status().Update(ctx, node); err != nil {
		return err
	}
	node.Spec.Taints = nil
	if err := b.c.Update(ctx, node); err != nil {
		return err
	}
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "py", Namespace: "bench"},
		Spec: sandlotv1.TemplateSpec{Image: "python:3.12", Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}}}
	if err := b.c.Create(ctx, tpl); err != nil {
		return err
	}
	// A template's sandboxes restore its base snapshot (never a cold boot):
	// play the kubelet and the agent until the base is Ready.
	return poll.Within(30*time.Second, "template "+tpl.Name+" base snapshot Ready", func() error {
		return b.buildBase(ctx, tpl)
	})
}

// buildBase moves the template's base build one step: the builder's pod
// Running and Ready, the base Snapshot Ready; nil once the template says
// BaseSnapshotReady.
func (b *bench) buildBase(ctx context.Context, tpl *sandlotv1.Template) error {
	pods := &corev1.PodList{}
	if err := b.c.List(ctx, pods, client.InNamespace("bench")); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning {
			continue
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.99.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		_ = b.c.Status().Update(ctx, p)
	}
	snaps := &sandlotv1.SnapshotList{}
	if err := b.c.List(ctx, snaps, client.InNamespace("bench")); err != nil {
		return err
	}
	for i := range snaps.Items {
		sn := &snaps.Items[i]
		if sn.Status.NodeName != "" && sn.Status.Phase == sandlotv1.DataPending {
			sn.Status.Phase, sn.Status.Location, sn.Status.RemoteStatus = sandlotv1.DataReady, "store://"+sn.Name, sandlotv1.RemoteNotApplicable
			_ = b.c.Status().Update(ctx, sn)
		}
	}
	if err := b.c.Get(ctx, client.ObjectKeyFromObject(tpl), tpl); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(tpl.Status.Conditions, sandlotv1.ConditionBaseSnapshotReady); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("BaseSnapshotReady: %+v", c)
	}
	return nil
}

// hops times n API writes, each until its watch event arrives: the floor
// any step of the controller pays.
func (b *bench) hops(ctx context.Context, n int, list client.ObjectList, write func(int) (string, error)) ([]time.Duration, error) {
	w, err := b.wc.Watch(ctx, list, client.InNamespace("bench"))
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []time.Duration
	for i := range n {
		start := time.Now()
		name, err := write(i)
		if err != nil {
			return nil, err
		}
		for ev := range w.ResultChan() {
			if o, ok := ev.Object.(client.Object); ok && o.GetName() == name && ev.Type != watch.Bookmark {
				break
			}
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// baselines: a ConfigMap create, and an annotation patch of a Template (a
// sandlot CR, with its schema and CEL rules) whose reconcile writes nothing.
func (b *bench) baselines(ctx context.Context, n int) error {
	cm, err := b.hops(ctx, n, &corev1.ConfigMapList{}, func(i int) (string, error) {
		name := fmt.Sprintf("hop-%d", i)
		return name, b.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"}})
	})
	if err != nil {
		return err
	}
	row("baseline: ConfigMap create -> watch", 1, cm)
	cr, err := b.hops(ctx, n, &sandlotv1.TemplateList{}, func(i int) (string, error) {
		tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "py", Namespace: "bench"}}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench":"%d"}}}`, i)
		return tpl.Name, b.c.Patch(ctx, tpl, client.RawPatch(types.MergePatchType, []byte(patch)))
	})
	if err != nil {
		return err
	}
	row("baseline: sandlot CR patch -> watch", 1, cr)
	return nil
}

// round creates c sandboxes at once; for each it times create -> Pod
// exists, then marks every pod Running and times -> Sandbox Running.
func (b *bench) round(ctx context.Context, c int, tag string) (toPod, toRunning []time.Duration, err error) {
	pw, err := b.wc.Watch(ctx, &corev1.PodList{}, client.InNamespace("bench"))
	if err != nil {
		return nil, nil, err
	}
	defer pw.Stop()
	created := map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range c {
		name := fmt.Sprintf("%s-%d", tag, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"},
				Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "py"}, TimeoutSeconds: ptr.To[int32](3600)}}
			mu.Lock()
			created[name] = time.Now()
			mu.Unlock()
			if e := b.c.Create(ctx, s); e != nil {
				mu.Lock()
				err = e
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	timeout := time.After(60 * time.Second)
	for len(seen) < c {
		select {
		case ev := <-pw.ResultChan():
			pod, ok := ev.Object.(*corev1.Pod)
			if ok && ev.Type == watch.Added && strings.HasPrefix(pod.Name, tag+"-") && !seen[pod.Name] {
				seen[pod.Name] = true
				mu.Lock()
				toPod = append(toPod, time.Since(created[pod.Name]))
				mu.Unlock()
			}
		case <-timeout:
			return nil, nil, fmt.Errorf("%s: only %d/%d pods within 60s", tag, len(seen), c)
		}
	}
	toRunning, err = b.markRunning(ctx, tag, c)
	return toPod, toRunning, err
}

// markRunning plays the kubelet for every pod of the round and times until
// each Sandbox reports Running.
func (b *bench) markRunning(ctx context.Context, tag string, c int) ([]time.Duration, error) {
	sw, err := b.wc.Watch(ctx, &sandlotv1.SandboxList{}, client.InNamespace("bench"))
	if err != nil {
		return nil, err
	}
	defer sw.Stop()
	started := map[string]time.Time{}
	for i := range c {
		name := fmt.Sprintf("%s-%d", tag, i)
		pod := &corev1.Pod{}
		if err := b.c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: name}, pod); err != nil {
			return nil, err
		}
		now := metav1.Now()
		pod.Status.Phase, pod.Status.PodIP, pod.Status.StartTime = corev1.PodRunning, fmt.Sprintf("10.200.%d.%d", i/250, i%250+1), &now
		started[name] = time.Now()
		if err := b.c.Status().Update(ctx, pod); err != nil {
			return nil, err
		}
	}
	var out []time.Duration
	done := map[string]bool{}
	timeout := time.After(60 * time.Second)
	for len(done) < c {
		select {
		case ev := <-sw.ResultChan():
			s, ok := ev.Object.(*sandlotv1.Sandbox)
			if ok && s.Status.Phase == sandlotv1.SandboxRunning && strings.HasPrefix(s.Name, tag+"-") && !done[s.Name] {
				done[s.Name] = true
				out = append(out, time.Since(started[s.Name]))
			}
		case <-timeout:
			return nil, fmt.Errorf("%s: only %d/%d sandboxes Running within 60s", tag, len(done), c)
		}
	}
	return out, nil
}

func startManager(ctx context.Context, env *kube.Env) error {
	cfg, err := env.ComponentConfig("sandlot-controller") // the chart's RBAC, as installed
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Cache: controllers.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		return err
	}
	if err := controllers.SetupAll(mgr, controllers.Options{}); err != nil {
		return err
	}
	go func() { _ = mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	return nil
}

func mustWatchClient(env *kube.Env) client.WithWatch {
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		panic(err)
	}
	return c
}

func row(name string, c int, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	pct := func(p float64) time.Duration { return d[int(p*float64(len(d)-1)+0.5)] }
	fmt.Printf("%-34s %4d %5d %8s %8s %8s %8s\n", name, c, len(d), ms(d[0]), ms(pct(0.5)), ms(pct(0.95)), ms(d[len(d)-1]))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func parseLevels(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}
