package scale

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// recorder times each sandbox from its create call to its pod existing
// (a pod labelled with it: its own, or a pool pod it claimed) and to its
// phase Running, as a watch sees them.
type recorder struct {
	mu      sync.Mutex
	created map[string]time.Time
	pod     map[string]time.Time
	running map[string]time.Time
	pods    map[string]string // sandbox → the first pod seen for it
	podsSet map[string]int    // pod name → sandboxes seen in it (duplicates)
	cache   cache.Cache
}

func newRecorder(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (*recorder, error) {
	r := &recorder{created: map[string]time.Time{}, pod: map[string]time.Time{}, running: map[string]time.Time{},
		pods: map[string]string{}, podsSet: map[string]int{}}
	var err error
	r.cache, err = cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{Namespace: {}}})
	if err != nil {
		return nil, err
	}
	for obj, on := range map[client.Object]func(any){&corev1.Pod{}: r.onPod, &sandlotv1.Sandbox{}: r.onSandbox} {
		inf, err := r.cache.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o any) { on(o) }}); err != nil {
			return nil, err
		}
	}
	go func() { _ = r.cache.Start(ctx) }()
	if !r.cache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("recorder cache did not sync")
	}
	return r, nil
}

func (r *recorder) onPod(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok || pod.Labels[sandlotv1.LabelSandbox] == "" {
		return
	}
	now, name := time.Now(), pod.Labels[sandlotv1.LabelSandbox]
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.pod[name]; !seen {
		r.pod[name], r.pods[name] = now, pod.Name
		r.podsSet[pod.Namespace+"/"+pod.Name]++
	}
}

func (r *recorder) onSandbox(o any) {
	sbx, ok := o.(*sandlotv1.Sandbox)
	if !ok || sbx.Status.Phase != sandlotv1.SandboxRunning {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.running[sbx.Name]; !seen {
		r.running[sbx.Name] = now
	}
}

// creating records a sandbox's create call.
func (r *recorder) creating(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.created[name] = time.Now()
}

// latencies are the create → pod and create → Running times of names,
// and how many of them have no pod or are not Running yet.
func (r *recorder) latencies(names []string) (toPod, toRunning []time.Duration, noPod, notRunning int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		c := r.created[n]
		if p, ok := r.pod[n]; ok {
			toPod = append(toPod, p.Sub(c))
		} else {
			noPod++
		}
		if p, ok := r.running[n]; ok {
			toRunning = append(toRunning, p.Sub(c))
		} else {
			notRunning++
		}
	}
	return toPod, toRunning, noPod, notRunning
}

// runningCount is how many of names are Running.
func (r *recorder) runningCount(names []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range names {
		if _, ok := r.running[s]; ok {
			n++
		}
	}
	return n
}

// sharedPods are the pods more than one sandbox was first seen in.
func (r *recorder) sharedPods() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for p, n := range r.podsSet {
		if n > 1 {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
