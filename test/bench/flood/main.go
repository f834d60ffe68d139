// Command flood measures what a flooding guest costs its shim (make
// bench-flood; docs/security.md row 6). One sandbox floods every stream
// the shim carries from the guest: its app writes `yes` to stdout, and
// two processes exec'd into it write `yes` to stdout and to stderr
// through `ctr task exec` into a pipe nobody reads (a client that stops
// reading). After -stall-after, containerd itself is stopped (SIGSTOP)
// until the end: the app's log copier and the shim's event publisher
// stop reading too. The shim's RSS and its cgroup's memory are sampled
// every -every for -duration, beside a quiet sandbox's shim (its app
// sleeps) in the same run: the floor. The queues fill to their bounds
// once their readers stop; flat means that over the last half of the
// stall the flooded shim grows no more than the quiet one (+2 MiB).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/test/bench/host"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
	shimtest "github.com/sandlot-dev/sandlot/test/shim"
	"github.com/sandlot-dev/sandlot/vm"
)

const (
	floodImage = "sandlot.test/flood:1"
	quietImage = "sandlot.test/quiet:1"
)

func main() {
	asJSON := flag.Bool("json", false, "print JSON instead of a table")
	duration := flag.Duration("duration", 5*time.Minute, "how long the floods run while the shims are sampled")
	every := flag.Duration("every", 10*time.Second, "the sampling interval")
	stallAfter := flag.Duration("stall-after", time.Minute, "when containerd is stopped (SIGSTOP) until the end")
	flag.Parse()
	var table stats.Table
	var verdict string
	err := crienv.Run("bench-flood", func(t crienv.T) {
		e := shimtest.Start(t)
		e.ImportImage(t, floodImage, crienv.Image{Cmd: []string{"/bin/sh", "-c", "exec yes app-stdout-flood"}})
		e.ImportImage(t, quietImage, crienv.Image{Cmd: []string{"/bin/sleep", "100000"}})
		r := &run{e: e, t: t}
		verdict = r.measure(&table, *duration, *every, *stallAfter)
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
	table.Print(os.Stdout, fmt.Sprintf("shim memory under a flooding guest, %v sampled every %v (containerd stopped after %v), accel %s, %s",
		*duration, *every, *stallAfter, accel, host.Describe()))
	fmt.Println()
	fmt.Println(verdict)
}

type run struct {
	e *shimtest.Env
	t crienv.T
}

// sandbox is one pod under the shim and its shim's process.
type sandbox struct {
	pod, container string
	shim           int
}

func (r *run) start(name, image string) sandbox {
	pod, cfg := r.e.RunPod(r.t, name, shimtest.Handler, nil)
	r.t.Cleanup(func() { r.e.RemovePod(r.t, pod) })
	c := r.e.CreateStart(r.t, pod, cfg, name, image, nil)
	pid, err := shimOf(pod)
	if err != nil {
		r.t.Fatal(err)
	}
	return sandbox{pod: pod, container: c, shim: pid}
}

// execUnread starts sh -c script in the container through ctr, its
// output into a pipe that is never read: ctr blocks on its first full
// write and stops reading the shim's FIFO.
func (r *run) execUnread(ctx context.Context, s sandbox, id, script string) {
	pr, pw, err := os.Pipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := r.e.CtrCommand(ctx, "task", "exec", "--exec-id", id, s.container, "/bin/sh", "-c", script)
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("ctr task exec %s: %v", id, err)
	}
	r.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		pr.Close()
		pw.Close()
	})
}

// measure runs the floods and samples both shims; the verdict line says
// whether the flooded one stayed flat.
func (r *run) measure(table *stats.Table, duration, every, stallAfter time.Duration) string {
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	flood, quiet := r.start("flood", floodImage), r.start("quiet", quietImage)
	r.execUnread(ctx, flood, "stdout-unread", "exec yes exec-stdout-flood")
	r.execUnread(ctx, flood, "stderr-unread", "exec yes exec-stderr-flood >&2")
	r.t.Cleanup(func() { _ = r.e.SignalContainerd(syscall.SIGCONT) })
	shims := []struct {
		name string
		s    sandbox
		mem  *samples
	}{{"flooded sandbox's shim", flood, &samples{}}, {"quiet sandbox's shim (floor)", quiet, &samples{}}}
	began, stalled := time.Now(), false
	for time.Since(began) <= duration {
		if !stalled && time.Since(began) >= stallAfter {
			if err := r.e.SignalContainerd(syscall.SIGSTOP); err != nil {
				r.t.Fatal(err)
			}
			stalled = true
		}
		for _, sh := range shims {
			if err := sh.mem.add(sh.s.shim, stalled); err != nil {
				r.t.Fatalf("%s: %v", sh.name, err)
			}
		}
		time.Sleep(every) // the sampling interval: this is a measurement over time, not a wait
	}
	if err := r.e.SignalContainerd(syscall.SIGCONT); err != nil {
		r.t.Fatal(err)
	}
	for _, sh := range shims {
		table.Add(sh.name+": RSS", "MiB", sh.mem.rss, "")
		table.Add(sh.name+": its cgroup's memory.current", "MiB", sh.mem.cgroup, "")
	}
	fg, qg := shims[0].mem.lateGrowth(), shims[1].mem.lateGrowth()
	verdict := "flat"
	if fg > qg+2 {
		verdict = "GROWING"
	}
	return fmt.Sprintf("flooded shim RSS, MiB, every sample: %s\nquiet shim RSS: %s\n"+
		"RSS growth over the last half of containerd's stall: flooded shim %+.1f MiB, quiet shim %+.1f MiB: %s (max %.1f MiB against %.1f; cap 128 MiB)",
		series(shims[0].mem.rss), series(shims[1].mem.rss), fg, qg, verdict, maxOf(shims[0].mem.rss), maxOf(shims[1].mem.rss))
}
