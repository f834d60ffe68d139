package vm

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// trace prints how long each step of an operation took, to stderr, when
// SANDLOT_VM_TRACE is set: to see what dominates a restore or snapshot.
type trace struct {
	name  string
	start time.Time
	last  time.Time
	steps []string
}

func newTrace(name string) *trace {
	if os.Getenv("SANDLOT_VM_TRACE") == "" {
		return nil
	}
	now := time.Now()
	return &trace{name: name, start: now, last: now}
}

func (t *trace) step(what string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.steps = append(t.steps, fmt.Sprintf("%s %.1fms", what, float64(now.Sub(t.last).Microseconds())/1000))
	t.last = now
}

func (t *trace) done() {
	if t == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "vm trace: %s: %s; total %.1fms\n", t.name, strings.Join(t.steps, ", "),
		float64(time.Since(t.start).Microseconds())/1000)
}
