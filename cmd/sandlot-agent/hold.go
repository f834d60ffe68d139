package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// holdCmd is the sandlot-store DaemonSet's container (juicefs store). Its
// pod holds the store's PVC, so the node's JuiceFS mount stays published
// for as long as the pod lives, whatever becomes of the agent's pods: the
// VMs map snapshot files through this pod's volume directory, and the
// agent finds it through the link written here (--link names it, a node
// path the agent shares; --target is this pod's CSI volumes directory).
// The link goes when the pod stops, if it is still this pod's.
func holdCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hold-volume", flag.ContinueOnError)
	link := fs.String("link", "", "the link to write (required)")
	target := fs.String("target", "", "what it points at: this pod's CSI volumes directory on the node (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *link == "" || *target == "" || !filepath.IsAbs(*link) || !filepath.IsAbs(*target) {
		return errors.New("hold-volume: --link and --target must be absolute paths")
	}
	if err := writeLink(*link, *target); err != nil {
		return err
	}
	fmt.Printf("hold-volume: %s -> %s\n", *link, *target)
	<-ctx.Done()
	if cur, err := os.Readlink(*link); err == nil && cur == *target {
		return os.Remove(*link)
	}
	return nil
}

// writeLink replaces link atomically (a rename over the old one).
func writeLink(link, target string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("hold-volume: %w", err)
	}
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("hold-volume: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		return fmt.Errorf("hold-volume: %w", err)
	}
	return nil
}

// awaitGlob resolves a glob matching one path, waiting up to within for
// it to appear (the sandlot-store pod's volume may be published after the
// agent starts), with every symlink resolved: the path handed to the shims
// stays valid when the link later changes.
func awaitGlob(ctx context.Context, pattern string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		p, err := resolveGlob(pattern)
		if err == nil {
			if _, err = os.Stat(p); err == nil {
				return filepath.EvalSymlinks(p)
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("after %v: %w", within, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
