package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	"github.com/sandlot-dev/sandlot/vm"
)

const (
	ns       = "default" // the team of a key IssueAPIKey issues
	template = "soak"
	workers  = 2 // TCG on two cores: each worker's sandboxes cost a core's share
)

// TestSoak churns for SOAK_MIN minutes (5) under the fault schedule
// (SOAK_LONG: all seven faults, else four), then accounts for every
// operation and leak, and writes its table and PNG to SOAK_OUT (a temp
// dir by default).
func TestSoak(t *testing.T) {
	run, long, out := options(t)
	k := sbxtest.Client(t, c)
	e, kube := setup(t, k)
	before, beforeFiles := steady(t, k)
	led := &ledger{}
	orphans := make(chan string, 10000)
	fs := faults(c, long)
	t0 := time.Now()
	sbxtest.Logf("soak: %s of churn, %d workers, %d faults every %s", run, workers, len(fs), run/time.Duration(len(fs)+1))
	faultCtx, stopFaults := context.WithTimeout(context.Background(), run)
	defer stopFaults()
	var wg sync.WaitGroup
	wg.Go(func() { schedule(faultCtx, fs, t0, run/time.Duration(len(fs)+1), led, sbxtest.Logf) })
	for i := range workers {
		w := &worker{n: i, e: e, kube: kube, template: template, led: led, rng: rand.New(rand.NewPCG(uint64(i), uint64(t0.UnixNano()))), orphans: orphans}
		wg.Go(func() { w.loop(t0.Add(run)) })
	}
	wg.Wait()
	close(orphans)
	end := time.Now()
	sbxtest.Logf("soak: churn over after %s; cleaning up", end.Sub(t0).Round(time.Second))
	cleanup(t, e, orphans)
	leaks(t, k, before, beforeFiles)
	account(t, led, long)
	report(t, led, t0, end.Sub(t0), out)
}

func options(t *testing.T) (run time.Duration, long bool, out string) {
	minutes := 5
	if v := os.Getenv("SOAK_MIN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("SOAK_MIN=%q: want a whole number of minutes, at least 2", v)
		}
		minutes = n
	}
	if out = os.Getenv("SOAK_OUT"); out == "" {
		out = t.TempDir()
	}
	return time.Duration(minutes) * time.Minute, os.Getenv("SOAK_LONG") != "", out
}

// setup makes the churn's template (a warm pool of one VM per node, its
// base on both), a key, the API's address and the plugin.
func setup(t *testing.T, k client.Client) (*e2b, *kubeOps) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: template, Namespace: ns},
		Spec: sandlotv1.TemplateSpec{Image: sbxtest.DefaultImage(t), Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256},
			WarmPool: 1, Slots: ptr.To[int32](0)}}
	if err := k.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	if err := sbxtest.WaitBases(ctx, k, client.ObjectKeyFromObject(tpl), len(c.Nodes), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	api, key := sbxtest.APIAccess(t, c)
	plugin, err := sbxtest.BuildPlugin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}
	return &e2b{api: api, key: key, hc: hc}, &kubeOps{k: k, ns: ns, kubeconfig: c.Kubeconfig, plugin: plugin}
}

// steady is the inventory once the warm pool is full and nothing moves:
// two takes in a row agree.
func steady(t *testing.T, k client.Client) (inventory, map[string]int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var last, now inventory
	var files map[string]int64
	err := poll.Until(ctx, "a steady cluster before the churn", func() error {
		var err error
		files = map[string]int64{}
		if now, err = take(ctx, c, k, ns, files); err != nil {
			return err
		}
		defer func() { last = now }()
		if d := append(grown(last, now), grown(now, last)...); last == nil || len(d) > 0 {
			return &changing{d}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return now, files
}

type changing struct{ diff []string }

func (c *changing) Error() string { return "still changing: " + strings.Join(c.diff, "; ") }

// cleanup kills what a failed kill left and deletes what a failed
// delete left, through the API, as a user would after an outage.
func cleanup(t *testing.T, e *e2b, orphans <-chan string) {
	for o := range orphans {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		kind, id, _ := strings.Cut(o, "/")
		var err error
		if kind == "sandbox" {
			err = e.kill(ctx, id)
		} else {
			err = e.deleteSnapshot(ctx, id)
		}
		cancel()
		var ae *apiError
		if err != nil && !(errors.As(err, &ae) && ae.code == http.StatusNotFound) {
			t.Errorf("cleanup: %s: %v", o, err)
		}
	}
}

// leaks waits for the inventory to come back to what it was before the
// churn; what stays above it is a leak.
func leaks(t *testing.T, k client.Client, before inventory, beforeFiles map[string]int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var diff []string
	var files map[string]int64
	err := poll.Until(ctx, "everything the churn made gone", func() error {
		files = map[string]int64{}
		now, err := take(ctx, c, k, ns, files)
		if err != nil {
			return err
		}
		if diff = grown(before, now); len(diff) > 0 {
			return &changing{diff}
		}
		return nil
	})
	if err != nil {
		t.Errorf("leaks after the churn:\n%s\nnew files (allocated bytes), the biggest:\n%s", strings.Join(diff, "\n"),
			strings.Join(newFiles(beforeFiles, files, 25), "\n"))
	}
}

// account fails the test for each lost operation, each failure outside
// every fault window or without a reason, and each fault whose part did
// not come back.
func account(t *testing.T, led *ledger, long bool) {
	v := judge(led.records, led.windows)
	sbxtest.Logf("soak: %d operations: %d ok, %d failed (each inside a fault window: %t), %d lost; %d faults",
		v.total, v.oks, v.failures, len(v.outside) == 0, v.lost, len(led.windows))
	for _, p := range v.problems() {
		t.Error(p)
	}
	for _, w := range led.windows {
		if w.err != "" {
			t.Errorf("fault %s: its part did not come back: %s", w.fault, w.err)
		}
	}
	if want := len(faults(c, long)); len(led.windows) < want {
		t.Errorf("%d faults injected, want at least %d (the run was too short for the schedule)", len(led.windows), want)
	}
	if v.oks == 0 {
		t.Error("no operation worked")
	}
}

// report logs the table and writes it with the PNG to out.
func report(t *testing.T, led *ledger, t0 time.Time, run time.Duration, out string) {
	tab := table(led.records)
	sbxtest.Logf("soak:\n%s", tab)
	if err := os.WriteFile(filepath.Join(out, "soak.md"), []byte(tab), 0o644); err != nil {
		t.Error(err)
	}
	f, err := os.Create(filepath.Join(out, "soak.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	accel, err := vm.DetectAccel()
	if err != nil {
		t.Error(err)
	}
	title := fmt.Sprintf("sandlot soak, %s, %s", run.Round(time.Minute), accel)
	if err := drawRun(f, title, led.records, led.windows, t0, run); err != nil {
		t.Error(err)
	}
	sbxtest.Logf("soak: wrote %s", f.Name())
}
