package sbxtest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// FindQEMU finds the QEMU of the pod with that UID in /proc (the shim
// names it pod-<podUID>) and returns its pid and command line.
func FindQEMU(podUID string) (pid int, args []string, ok bool) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte("\x00-name\x00pod-"+podUID+"\x00")) {
			return pid, strings.Split(string(cmdline), "\x00"), true
		}
	}
	return 0, nil, false
}
