// Command images writes sandlot's images as OCI archives that
// `ctr images import` reads, without a Docker daemon (make image): each
// FROM scratch with static binaries, as the Dockerfile builds them.
//
//	sandlot-controller  /sandlot-controller                    (uid 65532)
//	sandlot-api         /sandlot-api                           (uid 65532)
//	sandlot-agent       /sandlot-agent, and what its install step copies onto
//	                    nodes: /opt/sandlot/bin/containerd-shim-sandlot-v2,
//	                    /opt/sandlot/vm/vmlinux, /opt/sandlot/vm/initramfs.cpio.gz,
//	                    /opt/sandlot/qemu/ (the QEMU bundle, hack/qemu-bundle.sh)
//
//	go run ./hack/images -bin DIR -kernel FILE -initrd FILE -qemu DIR -tag TAG -o DIR
package main

import (
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sandlot-dev/sandlot/internal/oci"
)

// Repository is the images' repository prefix (the chart's defaults).
const Repository = "docker.io/sandlot/"

// nonRoot is the controller's and the API's user: their Deployments run
// as non-root.
const nonRoot = "65532:65532"

// image is one image: files placed at their path in the image, by source.
type image struct {
	name  string
	user  string
	files map[string]string // path in the image -> file on the host
}

func main() {
	bin := flag.String("bin", "bin", "the static binaries (make build)")
	kernel := flag.String("kernel", "", "the guest kernel (make vm-assets)")
	initrd := flag.String("initrd", "", "the guest initramfs (make vm-assets)")
	qemu := flag.String("qemu", "", "the QEMU bundle (hack/qemu-bundle.sh)")
	tag := flag.String("tag", "", "the images' tag (the chart's appVersion)")
	out := flag.String("o", "", "directory for <name>.tar")
	flag.Parse()
	if *kernel == "" || *initrd == "" || *qemu == "" || *tag == "" || *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: images -bin DIR -kernel FILE -initrd FILE -qemu DIR -tag TAG -o DIR")
		os.Exit(2)
	}
	images := []image{
		{name: "sandlot-controller", user: nonRoot, files: map[string]string{"sandlot-controller": filepath.Join(*bin, "sandlot-controller")}},
		{name: "sandlot-api", user: nonRoot, files: map[string]string{"sandlot-api": filepath.Join(*bin, "sandlot-api")}},
		{name: "sandlot-agent", files: map[string]string{
			"sandlot-agent": filepath.Join(*bin, "sandlot-agent"),
			"opt/sandlot/bin/containerd-shim-sandlot-v2": filepath.Join(*bin, "containerd-shim-sandlot-v2"),
			"opt/sandlot/vm/vmlinux":                     *kernel,
			"opt/sandlot/vm/initramfs.cpio.gz":           *initrd,
		}},
	}
	if err := addTree(images[2].files, "opt/sandlot/qemu", *qemu); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	for _, img := range images {
		ref := Repository + img.name + ":" + *tag
		digest, err := write(img, ref, filepath.Join(*out, img.name+".tar"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "images: %s: %v\n", img.name, err)
			os.Exit(1)
		}
		fmt.Println(ref, digest)
	}
}

// write lays the image's files out in a temporary tree and archives it.
func write(img image, ref, out string) (string, error) {
	tree, err := os.MkdirTemp("", "sandlot-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tree)
	for dst, src := range img.files {
		if err := copyFile(src, filepath.Join(tree, dst)); err != nil {
			return "", err
		}
	}
	if err := pinTimes(tree); err != nil {
		return "", err
	}
	cfg := oci.Config{Entrypoint: []string{"/" + img.name}, User: img.user}
	return oci.WriteArchive(out, ref, cfg, func(w io.Writer) error { return oci.TarTree(w, tree) })
}

// builtAt is every entry's mtime in the images: the copies made now
// would give each build its own layer digest (a release built twice
// from one tag must be the same images).
var builtAt = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// pinTimes sets every entry of tree to builtAt.
func pinTimes(tree string) error {
	return filepath.WalkDir(tree, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, builtAt, builtAt)
	})
}

// addTree adds every regular file under dir to files, at its path below
// at; the bundle holds nothing else (it is made of resolved copies).
func addTree(files map[string]string, at, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		rel, err := filepath.Rel(dir, p)
		files[filepath.Join(at, rel)] = p
		return err
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%w (make build vm-assets)", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	outf, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(outf, in); err != nil {
		outf.Close()
		return err
	}
	return outf.Close()
}
