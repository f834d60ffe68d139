// Command shim benchmarks the sandlot shim under a real containerd (make
// bench-shim): RunPodSandbox + CreateContainer + StartContainer until the
// image's web server answers on the pod IP — a cold boot, a restore from a
// snapshot, and the same image under runc in the same run — single and 10
// concurrent.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	shimtest "github.com/sandlot-dev/sandlot/test/shim"
	"github.com/sandlot-dev/sandlot/vm"
)

const image = "sandlot.test/web:1"

// web serves a page on 8080: the image's own process answering is the
// "first answer" for both runtimes.
var web = crienv.Image{
	Cmd:   []string{"/bin/httpd", "-f", "-p", "8080", "-h", "/www"},
	Files: map[string]crienv.File{"/www/index.html": {Data: []byte("up\n")}},
}

func main() {
	asJSON := flag.Bool("json", false, "print JSON instead of a table")
	n := flag.Int("n", 5, "samples per single measurement")
	concurrency := flag.Int("c", 10, "pods started at once in the concurrent measurements")
	flag.Parse()
	var table stats.Table
	err := crienv.Run("bench-shim", func(t crienv.T) {
		b := &bench{e: shimtest.Start(t), t: t, table: &table}
		b.e.ImportImage(t, image, web)
		b.all(*n, *concurrency)
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
	qv, _ := vm.QEMUVersion("")
	table.Print(os.Stdout, fmt.Sprintf("sandlot shim under containerd %s, accel %s, %s, busybox httpd image (VM 256 MiB, 1 vCPU), %s",
		crienv.ContainerdVersion, accel, qv, host.Describe()))
	fmt.Println()
	for _, m := range []string{"cold boot", "restore from snapshot"} {
		table.Ratio(os.Stdout, "pod to first answer: sandlot "+m, "pod to first answer: runc")
		table.Ratio(os.Stdout, fmt.Sprintf("%d concurrent pods, each: sandlot %s", *concurrency, m), fmt.Sprintf("%d concurrent pods, each: runc", *concurrency))
	}
}

type bench struct {
	e     *shimtest.Env
	t     crienv.T
	table *stats.Table
	seq   int
	mu    sync.Mutex
}

func (b *bench) all(n, c int) {
	b.series("pod to first answer: runc", n, "runc", nil)
	b.series("pod to first answer: sandlot cold boot", n, shimtest.Handler, nil)
	snap := b.snapshot()
	b.series("pod to first answer: sandlot restore from snapshot", n, shimtest.Handler, shimtest.RestoreAnnotations(snap))
	b.concurrent(fmt.Sprintf("%d concurrent pods", c), "runc", c, "runc", nil)
	b.concurrent(fmt.Sprintf("%d concurrent pods", c), "sandlot cold boot", c, shimtest.Handler, nil)
	b.concurrent(fmt.Sprintf("%d concurrent pods", c), "sandlot restore from snapshot", c, shimtest.Handler, shimtest.RestoreAnnotations(snap))
}

// series starts n pods one after the other, removing each after it answered.
func (b *bench) series(name string, n int, handler string, ann map[string]string) {
	var samples []float64
	for range n {
		pod, d, err := b.start(handler, ann)
		if err != nil {
			b.t.Fatal(err)
		}
		samples = append(samples, stats.MS(d))
		b.e.RemovePod(b.t, pod)
	}
	b.table.Add(name, "ms", samples, "")
}

// concurrent starts c pods at once: each pod's time, and until all answer.
func (b *bench) concurrent(prefix, what string, c int, handler string, ann map[string]string) {
	samples, all, cleanups, errs := stats.Concurrently(c, func() (time.Duration, func(), error) {
		pod, d, err := b.start(handler, ann)
		if pod == "" {
			return d, nil, err
		}
		return d, func() { b.e.RemovePod(b.t, pod) }, err
	})
	for _, remove := range cleanups {
		remove()
	}
	if len(errs) > 0 {
		b.t.Fatalf("%s %s: %v", prefix, what, errs)
	}
	b.table.Add(prefix+", each: "+what, "ms", samples, "")
	b.table.Add(prefix+", all answered: "+what, "ms", []float64{stats.MS(all)}, "")
}

// start runs a pod and its container and waits for the page on the pod IP.
func (b *bench) start(handler string, ann map[string]string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.mu.Lock()
	b.seq++
	cfg := b.e.PodConfig(fmt.Sprintf("b%d", b.seq), ann)
	b.mu.Unlock()
	start := time.Now()
	run, err := b.e.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		return "", 0, fmt.Errorf("RunPodSandbox (%s): %w", handler, err)
	}
	pod := run.PodSandboxId
	created, err := b.e.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod,
		Config: crienv.ContainerConfig(cfg, "web", image, nil), SandboxConfig: cfg})
	if err != nil {
		return pod, 0, fmt.Errorf("CreateContainer (%s): %w", handler, err)
	}
	if _, err := b.e.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		return pod, 0, fmt.Errorf("StartContainer (%s): %w", handler, err)
	}
	st, err := b.e.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil {
		return pod, 0, err
	}
	if err := crienv.WaitHTTP(ctx, "http://"+st.GetStatus().GetNetwork().GetIp()+":8080/"); err != nil {
		return pod, 0, fmt.Errorf("first answer (%s): %w", handler, err)
	}
	return pod, time.Since(start), nil
}

// snapshot takes the snapshot the restores start from: a cold-booted pod
// whose web server answers.
func (b *bench) snapshot() string {
	pod, _, err := b.start(shimtest.Handler, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	defer b.e.RemovePod(b.t, pod)
	st, err := b.e.Runtime.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil {
		b.t.Fatal(err)
	}
	dir := filepath.Join(b.e.Dir, "bench-snapshot")
	resp, err := b.e.Control(b.t, st.GetStatus().GetMetadata().GetUid()).Snapshot(context.Background(), &controlapi.SnapshotRequest{Dir: dir})
	if err != nil {
		b.t.Fatal(err)
	}
	b.table.Add("snapshot of a cold-booted pod: VM paused", "ms", []float64{stats.MS(time.Duration(resp.PausedNanos))}, "")
	b.table.Add("snapshot of a cold-booted pod: until persisted", "ms", []float64{stats.MS(time.Duration(resp.TookNanos))}, "")
	return dir
}
