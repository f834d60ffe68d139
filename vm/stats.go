package vm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stats is what a VM costs the host.
type Stats struct {
	PSSBytes     int64         // proportional set size: shared pages split among their users
	PrivateBytes int64         // pages only this QEMU has (its CoW copies, heap, TCG code cache)
	CPU          time.Duration // user+system time QEMU has used
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

// Stats reads QEMU's memory and CPU use from /proc.
func (v *VM) Stats() (Stats, error) {
	pid := v.PID()
	rollup, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return Stats{}, fmt.Errorf("stats of %s: %w", v.cfg.Name, err)
	}
	var s Stats
	for _, line := range strings.Split(string(rollup), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Pss:":
			s.PSSBytes = kb << 10
		case "Private_Clean:", "Private_Dirty:":
			s.PrivateBytes += kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stats{}, fmt.Errorf("stats of %s: %w", v.cfg.Name, err)
	}
	str := string(stat)
	fields := strings.Fields(str[strings.LastIndex(str, ")")+2:])
	if len(fields) < 13 {
		return Stats{}, fmt.Errorf("stats of %s: short /proc/%d/stat", v.cfg.Name, pid)
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	s.CPU = time.Duration(utime+stime) * time.Second / clockTicks
	return s, nil
}
