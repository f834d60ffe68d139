package soak

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// outcome is how an operation ended.
type outcome string

const (
	// ok: it did what it said.
	ok outcome = "ok"
	// failed: it said it failed, with a reason (an error answer, a
	// refused connection, its deadline).
	failed outcome = "failed"
	// lost: it said it worked, or nothing was asked of the sandbox, and
	// the state is not there (a file gone, a sandbox that vanished).
	lost outcome = "lost"
)

// record is one operation.
type record struct {
	op         string
	start, end time.Time
	outcome    outcome
	reason     string // failed and lost: why
	sandbox    string
}

// window is a fault: from when it was injected until what it broke was
// back (its component Ready again).
type window struct {
	fault      string
	start, end time.Time
	err        string // the part did not come back
}

// ledger holds every operation and fault of a run.
type ledger struct {
	mu      sync.Mutex
	records []record
	windows []window
}

func (l *ledger) add(r record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
}

func (l *ledger) fault(w window) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows = append(l.windows, w)
}

// grace is how long after a fault's component is back its effects may
// still fail an operation: caches resync, leases move, a VM's resume
// that began during the fault finishes (TCG).
const grace = 60 * time.Second

// inFault is the fault whose window (plus grace) overlaps r, or "".
func inFault(r record, windows []window) string {
	for _, w := range windows {
		if !r.end.Before(w.start) && !r.start.After(w.end.Add(grace)) {
			return w.fault
		}
	}
	return ""
}

// verdict is a run's accounting: what must be zero is listed in bad.
type verdict struct {
	total, oks, failures, lost int
	outside                    []record // failed outside every fault window
	unnamed                    []record // failed or lost without a reason
	losses                     []record
}

// judge accounts for every operation: lost ones, and failures that fall
// outside every fault window or do not say why, are the run's defects.
func judge(records []record, windows []window) verdict {
	var v verdict
	for _, r := range records {
		v.total++
		switch r.outcome {
		case ok:
			v.oks++
		case failed:
			v.failures++
			if inFault(r, windows) == "" {
				v.outside = append(v.outside, r)
			}
		case lost:
			v.lost++
			v.losses = append(v.losses, r)
		}
		if r.outcome != ok && r.reason == "" {
			v.unnamed = append(v.unnamed, r)
		}
	}
	return v
}

// problems lists what makes the verdict fail, one line each.
func (v verdict) problems() []string {
	var out []string
	line := func(kind string, r record) {
		out = append(out, fmt.Sprintf("%s: %s of %s at %s: %s", kind, r.op, r.sandbox, r.start.Format("15:04:05"), r.reason))
	}
	for _, r := range v.losses {
		line("lost", r)
	}
	for _, r := range v.outside {
		line("failed outside every fault window", r)
	}
	for _, r := range v.unnamed {
		line("no reason", r)
	}
	return out
}

// ops is the operation names in the order of their first record.
func ops(records []record) []string {
	seen := map[string]time.Time{}
	for _, r := range records {
		if t, ok := seen[r.op]; !ok || r.start.Before(t) {
			seen[r.op] = r.start
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return seen[names[i]].Before(seen[names[j]]) })
	return names
}
