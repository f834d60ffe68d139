package soak

import (
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	windows := []window{{fault: "api", start: at(100), end: at(130)}}
	records := []record{
		{op: "create", start: at(0), end: at(10), outcome: ok},
		{op: "create", start: at(95), end: at(105), outcome: failed, reason: "503"},      // overlaps the fault
		{op: "pause", start: at(180), end: at(185), outcome: failed, reason: "timeout"},  // within grace
		{op: "write", start: at(300), end: at(301), outcome: failed, reason: "refused"},  // outside
		{op: "resume", start: at(310), end: at(320), outcome: lost, reason: "file gone"}, // lost
		{op: "kill", start: at(400), end: at(401), outcome: failed},                      // outside, no reason
	}
	v := judge(records, windows)
	if v.total != 6 || v.oks != 1 || v.failures != 4 || v.lost != 1 {
		t.Fatalf("counts: %+v", v)
	}
	if len(v.outside) != 2 || v.outside[0].op != "write" || v.outside[1].op != "kill" {
		t.Errorf("outside: %+v", v.outside)
	}
	if len(v.unnamed) != 1 || v.unnamed[0].op != "kill" {
		t.Errorf("unnamed: %+v", v.unnamed)
	}
	if got := len(v.problems()); got != 4 {
		t.Errorf("problems: %d, want 4: %q", got, v.problems())
	}
	if got := ops(records); len(got) != 5 || got[0] != "create" || got[4] != "kill" {
		t.Errorf("ops: %q", got)
	}
}
