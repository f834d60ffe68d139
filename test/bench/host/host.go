// Package host describes the benchmark machine for report headers.
package host

import (
	"fmt"
	"os"
	"strings"
)

// Describe is "<cores> cores, <CPU model>".
func Describe() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	model, cores := "", 0
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "model name") && model == "" {
			model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
		}
		if strings.HasPrefix(l, "processor") {
			cores++
		}
	}
	return fmt.Sprintf("%d cores, %s", cores, model)
}
