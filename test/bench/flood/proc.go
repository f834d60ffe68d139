package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// samples are one shim's memory over the run, in MiB.
type samples struct {
	rss, cgroup []float64
	// firstStalled is the index of the first sample with containerd stopped.
	firstStalled int
}

func (s *samples) add(pid int, stalled bool) error {
	rss, err := rssMiB(pid)
	if err != nil {
		return err
	}
	cg, err := cgroupMiB(pid)
	if err != nil {
		return err
	}
	if stalled && s.firstStalled == 0 {
		s.firstStalled = len(s.rss)
	}
	s.rss, s.cgroup = append(s.rss, rss), append(s.cgroup, cg)
	return nil
}

// lateGrowth is the RSS growth over the last half of the samples taken
// with containerd stopped: once the queues are full, none.
func (s *samples) lateGrowth() float64 {
	stalled := s.rss[s.firstStalled:]
	if len(stalled) < 2 {
		return 0
	}
	return stalled[len(stalled)-1] - stalled[len(stalled)/2]
}

func series(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(out, " ")
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// shimOf is the pid of the sandlot shim serving pod (started with -id
// <pod>).
func shimOf(pod string) (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-sandlot-v2" {
			continue
		}
		for i := range args[:len(args)-1] {
			if args[i] == "-id" && args[i+1] == pod {
				return strconv.Atoi(filepath.Base(filepath.Dir(p)))
			}
		}
	}
	return 0, fmt.Errorf("no sandlot shim runs for pod %s", pod)
}

func rssMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("the shim %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("the shim %d reports no VmRSS", pid)
}

// cgroupMiB is the memory use of the shim's cgroup (its own, capped):
// memory.usage_in_bytes of its v1 memory controller cgroup on a v1 or
// hybrid host, memory.current of its v2 cgroup otherwise.
func cgroupMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, err
	}
	file := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case parts[1] == "memory":
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.usage_in_bytes")
		case parts[0] == "0" && file == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.current")
		}
	}
	v, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("the shim %d's cgroup memory (%q): %w", pid, b, err)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
	return n / (1 << 20), err
}
