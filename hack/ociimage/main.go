// Command ociimage writes a directory tree as a one-layer OCI image archive
// that `ctr -n k8s.io images import` accepts: how hack/vm-assets.sh turns
// the Debian rootfs it builds into a local cluster's sandbox image without
// a registry or a Docker daemon. It prints the manifest digest.
//
//	go run ./hack/ociimage -dir DIR -ref REF -o FILE [-cmd ARG]... [-entrypoint ARG]...
//	    [-env K=V]... [-workdir D] [-user U]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sandlot-dev/sandlot/internal/oci"
)

// list is a repeatable flag: each use appends one element.
type list []string

func (l *list) String() string     { return strings.Join(*l, " ") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

const usage = "usage: ociimage -dir DIR -ref REF -o FILE [-cmd ARG]... [-entrypoint ARG]... [-env K=V]... [-workdir D] [-user U]"

func main() {
	dir := flag.String("dir", "", "the rootfs tree (required)")
	ref := flag.String("ref", "", "image reference, e.g. docker.io/library/name:tag (required)")
	out := flag.String("o", "", "archive to write (required)")
	var cfg oci.Config
	flag.StringVar(&cfg.WorkingDir, "workdir", "", "config WorkingDir")
	flag.StringVar(&cfg.User, "user", "", "config User")
	flag.Var((*list)(&cfg.Cmd), "cmd", "one config Cmd argument (repeat for each)")
	flag.Var((*list)(&cfg.Entrypoint), "entrypoint", "one config Entrypoint argument (repeat for each)")
	flag.Var((*list)(&cfg.Env), "env", "one config Env K=V (repeat for each)")
	flag.Parse()
	if *dir == "" || *ref == "" || *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	digest, err := run(*dir, *ref, *out, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

func run(dir, ref, out string, cfg oci.Config) (string, error) {
	for _, kv := range cfg.Env {
		if !strings.Contains(kv, "=") {
			return "", fmt.Errorf("-env %q: want K=V", kv)
		}
	}
	// Checked here: TarTree of a missing dir would fail only after the
	// archive was created.
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("-dir %s: not a directory (%v)", dir, err)
	}
	return oci.WriteArchive(out, ref, cfg, func(w io.Writer) error { return oci.TarTree(w, dir) })
}
