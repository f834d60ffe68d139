package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestStartStatusWrites: a start writes the sandbox's status once per
// step a user can see — a new pod's start Starting then Running, a warm
// pool claim Running at once — and not again when the pod it just created
// or claimed comes back on the watch (each write is an API server write
// and a watch event to every watcher of sandboxes: issue 21's writes per
// create).
func TestStartStatusWrites(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("writes-node", "16", "16Gi", nil)
	h.template("python", 512)

	fresh := h.watchStatuses("fresh")
	h.create(newSandbox("fresh", sandlotv1.SandboxSource{Template: "python"}))
	h.waitPhase("fresh", sandlotv1.SandboxStarting)
	h.setPod("fresh", corev1.PodRunning, "10.88.0.9")
	h.waitPhase("fresh", sandlotv1.SandboxRunning)
	h.wantStatusWrites(fresh, sandlotv1.SandboxStarting, sandlotv1.SandboxRunning)

	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) { spec.WarmPool = 1 })
	pool := h.runPool("python", 1)
	claimed := h.watchStatuses("claimed")
	h.create(newSandbox("claimed", sandlotv1.SandboxSource{Template: "python"}))
	s := h.waitPhase("claimed", sandlotv1.SandboxRunning)
	if !pool[s.Status.PodName] {
		t.Fatalf("sandbox claimed runs in %s, not the pool's pod %v", s.Status.PodName, pool)
	}
	h.wantStatusWrites(claimed, sandlotv1.SandboxRunning)
}

// watchStatuses records each distinct status the named sandbox is seen
// with, from before it exists until the test ends.
func (h *harness) watchStatuses(name string) func() []sandlotv1.SandboxStatus {
	h.t.Helper()
	e := cluster(h.t)
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		h.t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &sandlotv1.SandboxList{}, client.InNamespace(h.ns),
		client.MatchingFields{"metadata.name": name})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(w.Stop)
	seen := make(chan sandlotv1.SandboxStatus, 64)
	go func() {
		defer close(seen)
		var last *sandlotv1.SandboxStatus
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*sandlotv1.Sandbox)
			if !ok || ev.Type == watch.Deleted || (last != nil && equality.Semantic.DeepEqual(*last, s.Status)) {
				continue
			}
			last = s.Status.DeepCopy()
			if s.Status.Phase != "" {
				seen <- *last
			}
		}
	}()
	return func() []sandlotv1.SandboxStatus {
		var out []sandlotv1.SandboxStatus
		for {
			select {
			case st := <-seen:
				out = append(out, st)
			default:
				return out
			}
		}
	}
}

// wantStatusWrites checks that the status changed exactly once per phase
// given, in order, and stays so for a second after.
func (h *harness) wantStatusWrites(statuses func() []sandlotv1.SandboxStatus, phases ...sandlotv1.SandboxPhase) {
	h.t.Helper()
	var got []sandlotv1.SandboxStatus
	describe := func() string {
		var s []string
		for _, st := range got {
			c := condition(st.Conditions, sandlotv1.ConditionReady)
			s = append(s, fmt.Sprintf("%s (%s: %s)", st.Phase, c.Reason, c.Message))
		}
		return fmt.Sprint(s)
	}
	match := func() error {
		got = append(got, statuses()...)
		var seen []sandlotv1.SandboxPhase
		for _, st := range got {
			seen = append(seen, st.Phase)
		}
		if !slices.Equal(seen, phases) {
			return fmt.Errorf("status writes %s, want one per phase %v", describe(), phases)
		}
		return nil
	}
	h.eventually(5*time.Second, "the start's status writes", match)
	h.consistently(time.Second, "no later status write", match)
}
