// Command e2e benchmarks sandlot on a real cluster on this machine (make
// bench-e2e): a Sandbox of a template (a restore of the template's base
// snapshot, built first) created through the API until it is Running and
// its envd answers on the pod IP — single and 10 concurrent — with a
// plain runc pod of the same image answering HTTP as the baseline in the
// same run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

func main() {
	asJSON := flag.Bool("json", false, "print JSON instead of a table")
	n := flag.Int("n", 3, "samples per single measurement")
	conc := flag.Int("c", 10, "objects created at once in the concurrent measurements")
	flag.Parse()
	var table stats.Table
	err := crienv.Run("bench-e2e", func(t crienv.T) {
		b, err := newBench(t, &table)
		if err != nil {
			t.Fatal(err)
		}
		b.all(*n, *conc)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *asJSON {
		_ = table.JSON(os.Stdout)
		return
	}
	accel, _ := vm.DetectAccel()
	table.Print(os.Stdout, fmt.Sprintf("sandlot end to end: Kubernetes %s, containerd %s, accel %s, 1 node, Debian python3 image (VM 256 MiB, 1 vCPU; restored from the template's base snapshot), %s",
		cluster.K8sVersion, crienv.ContainerdVersion, accel, host.Describe()))
	fmt.Println()
	table.Ratio(os.Stdout, "Sandbox to Running + envd answer", "runc Pod to Running + HTTP answer")
	table.Ratio(os.Stdout, fmt.Sprintf("%d concurrent, each: Sandbox", *conc), fmt.Sprintf("%d concurrent, each: runc Pod", *conc))
}

type bench struct {
	t     crienv.T // Fatal ends the run through the cluster's cleanups
	k     client.WithWatch
	image string
	table *stats.Table
	seq   int
	mu    sync.Mutex
}

func newBench(t crienv.T, table *stats.Table) (*bench, error) {
	_, k := sbxbench.StartCluster(t, 1, nil)
	env, err := vmtest.LoadEnv()
	if err != nil {
		return nil, err
	}
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "default"},
		Spec: sandlotv1.TemplateSpec{Slots: ptr.To[int32](0), // the paths measured start pods (or claim warm pools)
			Image: env.ImageRef, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256},
			ReadinessProbe: &sandlotv1.ReadinessProbe{HTTPGet: &sandlotv1.HTTPGetProbe{Port: sandlotv1.CodeInterpreterPort, Path: "/health"}}}}
	if err := k.Create(context.Background(), tpl); err != nil {
		return nil, err
	}
	// The template's base snapshot first: sandboxes of it restore it.
	if err := sbxtest.WaitBases(context.Background(), k, client.ObjectKeyFromObject(tpl), 1, 5*time.Minute); err != nil {
		return nil, err
	}
	return &bench{t: t, k: k, image: env.ImageRef, table: table}, nil
}

func (b *bench) all(n, c int) {
	b.series("runc Pod to Running + HTTP answer", n, b.runcPod)
	b.series("Sandbox to Running + envd answer", n, b.sandbox)
	b.concurrent(fmt.Sprintf("%d concurrent, each: runc Pod", c), fmt.Sprintf("%d concurrent, all answered: runc Pod", c), c, b.runcPod)
	b.concurrent(fmt.Sprintf("%d concurrent, each: Sandbox", c), fmt.Sprintf("%d concurrent, all answered: Sandbox", c), c, b.sandbox)
}

// start creates one object, waits until it answers, deletes it after the
// measurement (the returned func) and returns the time to the answer.
type start func(ctx context.Context, name string) (time.Duration, func(), error)

func (b *bench) name(prefix string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	return fmt.Sprintf("%s-%d", prefix, b.seq)
}

func (b *bench) series(name string, n int, f start) {
	var samples []float64
	for range n {
		d, done, err := f(context.Background(), b.name("s"))
		if err != nil {
			b.t.Fatalf("%s: %v", name, err)
		}
		samples = append(samples, stats.MS(d))
		done()
	}
	b.table.Add(name, "ms", samples, "")
}

func (b *bench) concurrent(each, all string, c int, f start) {
	samples, total, cleanups, errs := stats.Concurrently(c, func() (time.Duration, func(), error) {
		return f(context.Background(), b.name("c"))
	})
	for _, done := range cleanups {
		done()
	}
	if len(errs) > 0 {
		b.t.Fatalf("%s: %v", each, errs)
	}
	b.table.Add(each, "ms", samples, "")
	b.table.Add(all, "ms", []float64{stats.MS(total)}, "")
}

// sandbox: create a Sandbox, wait for Running with a pod IP and envd's
// /health there.
func (b *bench) sandbox(ctx context.Context, name string) (time.Duration, func(), error) {
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "bench"}, TimeoutSeconds: ptr.To[int32](3600)}}
	began := time.Now()
	if err := b.k.Create(ctx, sbx); err != nil {
		return 0, nil, err
	}
	done := func() { b.deleteAndWait(sbx) }
	ip, err := b.wait(ctx, sbx, func() (string, bool) {
		return sbx.Status.PodIP, sbx.Status.Phase == sandlotv1.SandboxRunning && sbx.Status.PodIP != ""
	})
	if err == nil {
		err = crienv.WaitHTTP(ctx, "http://"+ip+":49983/health")
	}
	return time.Since(began), done, err
}

// runcPod: the same image under runc serving HTTP.
func (b *bench) runcPod(ctx context.Context, name string) (time.Duration, func(), error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "web", Image: b.image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"python3", "-m", "http.server", "49983"}}}}}
	began := time.Now()
	if err := b.k.Create(ctx, pod); err != nil {
		return 0, nil, err
	}
	done := func() { b.deleteAndWait(pod) }
	ip, err := b.wait(ctx, pod, func() (string, bool) {
		return pod.Status.PodIP, pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	})
	if err == nil {
		err = crienv.WaitHTTP(ctx, "http://"+ip+":49983/")
	}
	return time.Since(began), done, err
}

// wait watches obj until ready says so (a watch, not polling: ten
// pollers would queue behind the client's rate limiter); it returns the IP.
func (b *bench) wait(ctx context.Context, obj client.Object, ready func() (string, bool)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	list := &corev1.PodList{}
	var l client.ObjectList = list
	if _, ok := obj.(*sandlotv1.Sandbox); ok {
		l = &sandlotv1.SandboxList{}
	}
	w, err := b.k.Watch(ctx, l, client.InNamespace(obj.GetNamespace()), client.MatchingFields{"metadata.name": obj.GetName()})
	if err != nil {
		return "", err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		got, ok := ev.Object.(client.Object)
		if !ok || ev.Type == watch.Error {
			continue
		}
		if reflect.TypeOf(got) != reflect.TypeOf(obj) {
			continue
		}
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(got).Elem())
		if ip, ok := ready(); ok {
			return ip, nil
		}
	}
	return "", fmt.Errorf("%s: %w", obj.GetName(), ctx.Err())
}

func (b *bench) deleteAndWait(obj client.Object) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = b.k.Delete(ctx, obj)
	_ = poll.Until(ctx, obj.GetName()+" gone", func() error {
		if err := b.k.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}
