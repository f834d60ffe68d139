package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/sandlot-dev/sandlot/guest/pid1"
)

// Boot parameters. The kernel hands `NAME=value` words of its command line
// that it does not know itself to /init as environment variables (dotted
// names it keeps for modules), so the host sets these on the QEMU -append.
const (
	envBase    = "SANDLOT_BASE"    // read-only base disk, e.g. /dev/vda
	envLayer   = "SANDLOT_LAYER"   // writable layer, e.g. /dev/vdb
	envModules = "SANDLOT_MODULES" // ':'-separated .ko paths in the initramfs
	envControl = "SANDLOT_CONTROL" // the virtio-serial port of the control channel
	envUser    = "SANDLOT_USER"    // default user of the envd API
)

// defaultControlPort names the virtio-serial port by its name: without
// udev there is no /dev/virtio-ports/<name> link, so the services look the
// port up in /sys/class/virtio-ports once /sys is mounted.
const defaultControlPort = virtioPortPrefix + "sandlot.control"

// bootPlan is what /init does: the pid1 configuration, and the arguments
// of the services process it starts once the root is ready.
type bootPlan struct {
	Init  pid1.Config
	Serve []string
}

// planBoot reads the boot parameters.
func planBoot(getenv func(string) string) bootPlan {
	var modules []string
	for _, m := range strings.Split(getenv(envModules), ":") {
		if m != "" {
			modules = append(modules, m)
		}
	}
	control := getenv(envControl)
	if control == "" {
		control = defaultControlPort
	}
	user := getenv(envUser)
	if user == "" {
		user = autoUser
	}
	return bootPlan{
		Init:  pid1.Config{Modules: modules, BaseDevice: getenv(envBase), WritableDevice: getenv(envLayer)},
		Serve: []string{"--root", "/", "--control", control, "--default-user", user, "--apply-host"},
	}
}

// runInit is PID 1: boot, then run the services as a child process. The
// services wait on their own children with exec.Cmd; PID 1's central
// reaper only ever sees that one child and the orphans re-parented to it,
// so it never takes an exit status a service is waiting for.
func runInit() error {
	plan := planBoot(os.Getenv)
	plan.Init.Main = func(ctx context.Context, in *pid1.Init) error {
		var cmd *exec.Cmd
		_, exited, err := in.Reaper().Start(func() (int, error) {
			// /proc/self/exe still reaches this binary after the switch
			// into the sandbox's root hid the initramfs.
			cmd = exec.Command("/proc/self/exe", plan.Serve...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
			if err := cmd.Start(); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		})
		if err != nil {
			return fmt.Errorf("start services: %w", err)
		}
		select {
		case ws := <-exited:
			return fmt.Errorf("services exited: %v", ws)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			return nil
		}
	}
	return pid1.Run(plan.Init)
}
