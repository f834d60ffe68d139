package nodeagent

import (
	"strings"
	"time"
)

// stepTimer says how long each step of an operation took, for its log
// line: where a claim's activation spends its time under load.
type stepTimer struct {
	last  time.Time
	parts []string
}

func newStepTimer() *stepTimer { return &stepTimer{last: time.Now()} }

// done ends step (timed from the previous one, or the start).
func (s *stepTimer) done(step string) {
	now := time.Now()
	s.parts = append(s.parts, step+"="+now.Sub(s.last).Round(100*time.Microsecond).String())
	s.last = now
}

func (s *stepTimer) String() string { return strings.Join(s.parts, " ") }
