package scale

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Report is what a run measured.
type Report struct {
	Options           Options
	Bases             time.Duration
	Phases            []PhaseReport
	Paused, Snapshots int // the churn's pauses and snapshots
	paused, snapshots atomic.Int64
	ListPages         []time.Duration // each page of GET /v2/sandboxes at full size
	Listed            int             // sandboxes those pages held
	FilterList        time.Duration   // a metadata-filtered list, all its pages
	Floor             []time.Duration // a ConfigMap create seen by a watch
	Final             Costs           // totals at the end
	Live              int             // sandboxes live at the end
	SharedPods        []string        // pods two sandboxes were first seen in
}

// PhaseReport is one phase's creates.
type PhaseReport struct {
	Name               string
	Creates            int
	Issued, AllRunning time.Duration
	ToPod, ToRunning   []time.Duration
	NoPod, NotRunning  int
	Costs              Costs // what the control plane spent during the phase
}

// Costs are the control plane's counters at a moment (or a difference).
type Costs struct {
	API        counters // API server: requests, watch events, stored objects
	Etcd       counters
	Controller procStats // sandlot-controller's container process
	E2B        procStats // sandlot-api's
}

// snapshotCosts reads the counters now.
func (e *Env) snapshotCosts(ctx context.Context) (Costs, error) {
	var c Costs
	var err error
	if c.API, err = e.apiMetrics(ctx); err != nil {
		return c, err
	}
	if c.Etcd, err = e.etcdMetrics(ctx); err != nil {
		return c, err
	}
	if c.Controller, err = readComponent("sandlot-controller"); err != nil {
		return c, err
	}
	c.E2B, err = readComponent("sandlot-api")
	return c, err
}

// readComponent reads the process of a component's pod.
func readComponent(name string) (procStats, error) {
	pid, err := componentPID(name)
	if err != nil {
		return procStats{}, err
	}
	st, err := readProc(pid)
	if err != nil {
		return st, fmt.Errorf("%s (pid %d): %w", name, pid, err)
	}
	return st, nil
}

// minus is the change from b to c (memory: c's own).
func (c Costs) minus(b Costs) Costs {
	d := Costs{API: counters{}, Etcd: c.Etcd, Controller: c.Controller, E2B: c.E2B}
	for k, v := range c.API {
		d.API[k] = v - b.API[k]
	}
	d.Controller.CPU -= b.Controller.CPU
	d.E2B.CPU -= b.E2B.CPU
	return d
}

// Print writes the report as tables.
func (rep *Report) Print(w io.Writer) {
	o := rep.Options
	fmt.Fprintf(w, "\n# bench-scale: %d nodes, %d sandboxes, %.0f creates/s, pod start %v, warm pool %d and start slots %d per node, agent caches %q\n",
		o.Nodes, o.Sandboxes, o.Rate, o.PodDelay, o.WarmPool, o.Slots, o.AgentCaches)
	fmt.Fprintf(w, "%-44s %6s %9s %9s %9s %9s %9s\n", "measure", "n", "min", "p50", "p95", "p99", "max")
	printDist(w, "floor: ConfigMap create seen by a watch", rep.Floor)
	for _, p := range rep.Phases {
		printDist(w, p.Name+": create -> Pod exists", p.ToPod)
		printDist(w, p.Name+": create -> Running", p.ToRunning)
	}
	printDist(w, "list: GET /v2/sandboxes page (100)", rep.ListPages)
	for _, p := range rep.Phases {
		fmt.Fprintf(w, "%s: %d creates issued at %.1f/s; all Running at %.1f/s; no pod %d, not Running %d\n", p.Name, p.Creates,
			float64(p.Creates)/p.Issued.Seconds(), float64(p.Creates)/p.AllRunning.Seconds(), p.NoPod, p.NotRunning)
		fmt.Fprintf(w, "%s: controller CPU %.2f ms per create, RSS %.0f MiB (peak %.0f); sandlot-api RSS %.0f MiB (peak %.0f)\n", p.Name,
			float64(p.Costs.Controller.CPU.Microseconds())/1000/float64(p.Creates), mib(p.Costs.Controller.RSS), mib(p.Costs.Controller.Peak),
			mib(p.Costs.E2B.RSS), mib(p.Costs.E2B.Peak))
		writes, reads := perCreate(p.Costs.API, "apiserver_request_total{", p.Creates)
		fmt.Fprintf(w, "%s: API requests per create %.2f, writes %.2f (of them refused %.2f): %s\n", p.Name, sum(writes)+sum(reads),
			sum(writes), sum(refused(writes)), top(writes, 10))
		fmt.Fprintf(w, "%s: API reads per create %.2f: %s\n", p.Name, sum(reads), top(reads, 6))
		events, _ := perCreate(p.Costs.API, "apiserver_watch_events_total{", p.Creates)
		fmt.Fprintf(w, "%s: watch events per create %.2f: %s\n", p.Name, sum(events), top(events, 6))
	}
	fmt.Fprintf(w, "listed %d sandboxes in %d pages; a metadata-filtered list in %v\n", rep.Listed, len(rep.ListPages), rep.FilterList.Round(time.Millisecond))
	rep.printStorage(w)
	fmt.Fprintf(w, "pauses %d, snapshots %d; pods shared by two sandboxes: %d\n", rep.Paused, rep.Snapshots, len(rep.SharedPods))
}

// printStorage writes the objects etcd holds per live sandbox.
func (rep *Report) printStorage(w io.Writer) {
	if rep.Live == 0 {
		return
	}
	var objs []kv
	for k, v := range rep.Final.API {
		r, ok := strings.CutPrefix(k, "apiserver_storage_objects{")
		if !ok {
			r, ok = strings.CutPrefix(k, "apiserver_resource_objects{")
		}
		if ok && v > 0 {
			objs = append(objs, kv{strings.TrimSuffix(r, "}"), v / float64(rep.Live)})
		}
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].v > objs[j].v })
	size := rep.Final.Etcd["etcd_mvcc_db_total_size_in_use_in_bytes{}"]
	fmt.Fprintf(w, "etcd at %d live sandboxes: %.1f KiB in use per sandbox; objects per sandbox: %s\n", rep.Live,
		size/1024/float64(rep.Live), top(objs, 8))
}

// perCreate is the requests per create by verb and resource (and code):
// the writes, and the reads (GET, LIST, WATCH). Other counters' samples
// all count as writes.
func perCreate(c counters, prefix string, creates int) (writes, reads []kv) {
	for _, x := range delta(counters{}, c, prefix) {
		per := kv{strings.TrimSuffix(x.k, "}"), x.v / float64(creates)}
		verb := strings.SplitN(per.k, ",", 2)[0]
		if prefix == "apiserver_request_total{" && (verb == "GET" || verb == "LIST" || verb == "WATCH") {
			reads = append(reads, per)
		} else {
			writes = append(writes, per)
		}
	}
	return writes, reads
}

// refused is the writes the API server answered with an error (the
// request counter's last label is the response code).
func refused(writes []kv) []kv {
	var out []kv
	for _, x := range writes {
		if i := strings.LastIndexByte(x.k, ','); i >= 0 && x.k[i+1:] >= "400" {
			out = append(out, x)
		}
	}
	return out
}

func sum(xs []kv) float64 {
	t := 0.0
	for _, x := range xs {
		t += x.v
	}
	return t
}

func top(xs []kv, n int) string {
	var parts []string
	for i, x := range xs {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", x.k, x.v))
	}
	return strings.Join(parts, "; ")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// printDist writes a distribution's row.
func printDist(w io.Writer, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) string { return ms(Percentile(s, p)) }
	fmt.Fprintf(w, "%-44s %6d %9s %9s %9s %9s %9s\n", name, len(s), ms(s[0]), q(0.5), q(0.95), q(0.99), ms(s[len(s)-1]))
}

// Percentile of sorted durations.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1)+0.5)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// WatchEventsPerCreate is how many watch events of resource the API
// server sent per create in the phase (every watcher counts: at a thousand
// nodes an unselected agent watch multiplies it by a thousand).
func (p PhaseReport) WatchEventsPerCreate(resource string) float64 {
	events, _ := perCreate(p.Costs.API, "apiserver_watch_events_total{", p.Creates)
	for _, x := range events {
		if x.k == resource {
			return x.v
		}
	}
	return 0
}
