// Package version is the release every sandlot binary reports: one
// version, stamped by the build (make build, make release) into the
// controller, the API, the node agent, the shim, the guest agent and the
// kubectl plugin, equal to the chart's appVersion and the images' tag.
package version

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
)

// Version is set by the linker:
//
//	-ldflags "-X github.com/sandlot-dev/sandlot/internal/version.Version=0.2.0"
//
// A plain `go build` (tests, go run) says "dev".
var Version = "dev"

// Revision is the VCS revision Go stamped in the binary, "" when none
// was (GOFLAGS=-buildvcs=false, a build outside a checkout).
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, modified := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" && modified {
		rev += "-modified"
	}
	return rev
}

// String is what `<binary> --version` prints: the binary, its version,
// and how it was built.
func String(binary string) string {
	s := fmt.Sprintf("%s %s (%s, %s/%s", binary, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if rev := Revision(); rev != "" {
		s += ", revision " + rev
	}
	return s + ")"
}

// Requested reports whether args (os.Args[1:]) ask for the version:
// its first argument is --version (or -version), whatever flags or
// subcommands the binary has otherwise (the shim's are containerd's).
func Requested(args []string) bool {
	return len(args) > 0 && slices.Contains([]string{"--version", "-version"}, args[0])
}

// Print writes String(binary) and a newline to w.
func Print(w io.Writer, binary string) {
	fmt.Fprintln(w, String(binary))
}
