package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	s3 "github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
)

// inventory counts what a sandbox's life leaves behind if anything
// leaks: objects in the team's namespace, VM processes, network
// namespaces with their taps and nftables tables, bytes under each
// node's data directories, objects in the store.
type inventory map[string]int64

// take counts everything; a count it cannot take is an error. files
// gets each data file's size.
func take(ctx context.Context, c *cluster.Cluster, k client.Client, ns string, files map[string]int64) (inventory, error) {
	inv := inventory{}
	lists := map[string]client.ObjectList{
		"Sandboxes": &sandlotv1.SandboxList{}, "PausedSandboxes": &sandlotv1.PausedSandboxList{},
		"Snapshots": &sandlotv1.SnapshotList{}, "Pods": &corev1.PodList{},
		"ConfigMaps": &corev1.ConfigMapList{}, "Secrets": &corev1.SecretList{},
	}
	for kind, l := range lists {
		if err := k.List(ctx, l, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("list %s: %w", kind, err)
		}
		inv[kind] = int64(meta.LenList(l))
	}
	inv["QEMU processes"] = int64(len(qemuProcesses()))
	netns, taps, tables, err := namespaces()
	if err != nil {
		return nil, err
	}
	inv["network namespaces"], inv["taps"], inv["nftables tables"] = netns, taps, tables
	for _, n := range c.Nodes {
		for name, dir := range map[string]string{"sandlot root": n.SandlotRoot, "store": n.StoreDir()} {
			b, err := bytesUnder(dir, files)
			if err != nil {
				return nil, err
			}
			inv[fmt.Sprintf("bytes: %s %s", n.Name, name)] = b
		}
		cached, err := downloads(n.StoreDir(), files)
		if err != nil {
			return nil, err
		}
		inv[fmt.Sprintf("bytes: %s store", n.Name)] -= cached
		inv[cachePrefix+n.Name] = cached
	}
	objects, err := storeObjects(ctx, c)
	if err != nil {
		return nil, err
	}
	inv["store objects"] = objects
	return inv, nil
}

// qemuProcesses are the host's QEMU processes (every node's VMs).
func qemuProcesses() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "qemu-system") {
			out = append(out, e.Name())
		}
	}
	return out
}

// namespaces counts the named network namespaces (each pod's), the taps
// in them and the nftables tables in them and on the host.
func namespaces() (netns, taps, tables int64, err error) {
	names, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("ip netns list: %w", err)
	}
	tables = int64(len(lines(exec.Command("nft", "list", "tables"))))
	for _, l := range strings.Split(strings.TrimSpace(string(names)), "\n") {
		fields := strings.Fields(l)
		if len(fields) == 0 {
			continue
		}
		name := fields[0]
		netns++
		taps += int64(len(lines(exec.Command("ip", "-n", name, "-o", "link", "show", "type", "tap"))))
		tables += int64(len(lines(exec.Command("ip", "netns", "exec", name, "nft", "list", "tables"))))
	}
	return netns, taps, tables, nil
}

// lines is cmd's non-empty output lines (none when it fails: a netns
// gone between the list and the look).
func lines(cmd *exec.Cmd) []string {
	b, err := cmd.Output()
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// bytesUnder sums the bytes the regular files under dir take on disk
// (allocated: VM memory and disks are sparse), 0 when dir does not
// exist; each file's goes to files.
func bytesUnder(dir string, files map[string]int64) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		used := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used = st.Blocks * 512
		}
		total += used
		files[path] = used
		return nil
	})
	return total, err
}

// newFiles lists the files in after and not in before, biggest first,
// at most n.
func newFiles(before, after map[string]int64, n int) []string {
	var out []string
	for p, size := range after {
		if _, ok := before[p]; !ok {
			out = append(out, fmt.Sprintf("%12d %s", size, p))
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out[:min(n, len(out))]
}

// storeObjects counts the objects in the cluster's store bucket.
func storeObjects(ctx context.Context, c *cluster.Cluster) (int64, error) {
	var n int64
	for o := range c.MinIOServer.Client().ListObjects(ctx, c.MinIOServer.Bucket, s3.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return 0, fmt.Errorf("list the store: %w", o.Err)
		}
		n++
	}
	return n, nil
}

// cachePrefix names the bytes of a node's s3 download cache: copies of
// keys complete in the bucket that this node downloaded to restore them
// (a snapshot's child, a cross-node resume). The cache is bounded by the
// agent's cap (--s3-cache-max-bytes, default half the disk) and evicts
// the least recently used: reported, not a leak.
const cachePrefix = "download cache bytes: "

// downloads sums the allocated bytes of the store's keys whose local copy
// was downloaded (their state says origin "remote"), and drops their
// files from files: the cache, not a leak.
func downloads(store string, files map[string]int64) (int64, error) {
	states, err := filepath.Glob(filepath.Join(store, ".store", "state", "*.json"))
	if err != nil {
		return 0, err
	}
	var total int64
	for _, st := range states {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // gone meanwhile
		}
		var state struct{ Key, Origin string }
		if json.Unmarshal(b, &state) != nil || state.Origin != "remote" || state.Key == "" {
			continue
		}
		dir := filepath.Join(store, filepath.FromSlash(state.Key))
		for p, used := range files {
			if p == st || strings.HasPrefix(p, dir+"/") {
				total += used
				delete(files, p)
			}
		}
	}
	return total, nil
}

// grown lists what is more than before (a leak), one line each; the
// download caches are not counted.
func grown(before, after inventory) []string {
	var out []string
	for k, v := range after {
		if strings.HasPrefix(k, cachePrefix) {
			continue
		}
		if v > before[k] {
			out = append(out, fmt.Sprintf("%s: %d before, %d after", k, before[k], v))
		}
	}
	sort.Strings(out)
	return out
}
