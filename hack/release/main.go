// Command release makes a release folder and pushes its images (make
// release): see internal/release.
//
//	go run ./hack/release -version X.Y.Z -o DIR [-registry HOST[:PORT][/PATH] [-plain-http]]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandlot-dev/sandlot/internal/release"
)

func main() {
	in := release.Inputs{Chart: "charts/sandlot", Changelog: "CHANGELOG.md"}
	flag.StringVar(&in.Version, "version", "", "the release's version (x.y.z), as charts/sandlot/Chart.yaml says")
	flag.StringVar(&in.Images, "images", "bin/images", "the image archives (make image)")
	flag.StringVar(&in.Plugin, "plugin", "bin/kubectl-sandlot", "the kubectl plugin (make build)")
	out := flag.String("o", "", "the release folder (made afresh)")
	registry := flag.String("registry", "", "push the images under this registry (empty: no push)")
	plainHTTP := flag.Bool("plain-http", false, "the registry speaks HTTP, not HTTPS")
	flag.Parse()
	if in.Version == "" || *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: release -version X.Y.Z -o DIR [-registry HOST[:PORT][/PATH] [-plain-http]]")
		os.Exit(2)
	}
	if err := run(in, *out, *registry, *plainHTTP); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(in release.Inputs, out, registry string, plainHTTP bool) error {
	files, err := release.Make(in, out)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Println(filepath.Join(out, f))
	}
	if registry == "" {
		fmt.Println("images not pushed (no REGISTRY)")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pushed, err := release.Push(ctx, out, in.Version, registry, plainHTTP)
	for _, ref := range pushed {
		fmt.Println("pushed", ref)
	}
	return err
}
