// Package vm owns QEMU: the microvm command line (built as data), the VM
// state machine, cold boot, snapshot (of first-generation and of restored
// VMs), copy-on-write restore and clone, pause and resume. It imports no
// Kubernetes packages.
package vm

import (
	"fmt"
	"os"
	"strings"
)

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// DetectAccel picks kvm where the CPU has hardware virtualisation (vmx or
// svm in cpuinfo) and tcg otherwise; SANDLOT_ACCEL overrides. On these
// machines /dev/kvm is PVM, which a stock guest kernel cannot use, and
// cpuinfo has neither flag: tcg.
func DetectAccel() (string, error) {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	return chooseAccel(os.Getenv("SANDLOT_ACCEL"), string(cpuinfo))
}

func chooseAccel(override, cpuinfo string) (string, error) {
	switch override {
	case AccelKVM, AccelTCG:
		return override, nil
	case "":
	default:
		return "", fmt.Errorf("SANDLOT_ACCEL=%q: unknown accelerator (want kvm or tcg)", override)
	}
	for _, line := range strings.Split(cpuinfo, "\n") {
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if f == "vmx" || f == "svm" {
				return AccelKVM, nil
			}
		}
	}
	return AccelTCG, nil
}
