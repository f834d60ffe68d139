package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sandlot-dev/sandlot/api/node"
)

// loadConfig reads the node's shim config (node.Config) named by a task's
// runtime options, and checks that its kernel and initramfs exist.
func loadConfig(opts *anypb.Any) (node.Config, error) {
	path, err := configPath(opts)
	if err != nil {
		return node.Config{}, err
	}
	var c node.Config
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return node.Config{}, fmt.Errorf("sandlot shim config: %w", err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return node.Config{}, fmt.Errorf("sandlot shim config %s: %w", path, err)
		}
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		return node.Config{}, err
	}
	var errs []error
	for name, p := range map[string]string{"kernel": c.Kernel, "initrd": c.Initrd} {
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("sandlot shim config: %s: %w", name, err))
		}
	}
	return c, errors.Join(errs...)
}

func configPath(opts *anypb.Any) (string, error) {
	if opts == nil || opts.GetTypeUrl() == "" {
		return "", nil
	}
	v, err := typeurl.UnmarshalAny(opts)
	if err != nil {
		return "", fmt.Errorf("runtime options: %w", err)
	}
	o, ok := v.(*runtimeoptions.Options)
	if !ok {
		return "", fmt.Errorf("runtime options: want %T (ConfigPath), got %T", o, v)
	}
	return o.ConfigPath, nil
}

// The cap on each shim's own memory (see shimcgroup.go), MiB.
const (
	defaultShimMemoryMaxMiB = node.DefaultShimMemoryMaxMiB
	// minShimMemoryMaxMiB: below it an idle shim would be killed.
	minShimMemoryMaxMiB = node.MinShimMemoryMaxMiB
)

// shimSelfConfig is what the node's shim config says of the shim process
// itself (node.Config's shimMemoryMaxMiB), read before loadConfig's
// checks: whatever else the config gets wrong, the shim is capped.
type shimSelfConfig struct {
	// ShimMemoryMaxMiB: a value below minShimMemoryMaxMiB is raised to it.
	ShimMemoryMaxMiB *int `json:"shimMemoryMaxMiB"`
}

// loadShimMemoryMaxMiB is the config's cap on the shim's own memory (MiB,
// 0: none); with an error, what the shim uses instead.
func loadShimMemoryMaxMiB(opts *anypb.Any) (int, error) {
	path, err := configPath(opts)
	if err != nil || path == "" {
		return defaultShimMemoryMaxMiB, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return defaultShimMemoryMaxMiB, fmt.Errorf("sandlot shim config: %w", err)
	}
	var c shimSelfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return defaultShimMemoryMaxMiB, fmt.Errorf("sandlot shim config %s: %w", path, err)
	}
	return shimMemoryMaxMiB(c.ShimMemoryMaxMiB)
}

func shimMemoryMaxMiB(v *int) (int, error) {
	switch {
	case v == nil:
		return defaultShimMemoryMaxMiB, nil
	case *v < 0:
		return defaultShimMemoryMaxMiB, fmt.Errorf("shimMemoryMaxMiB %d: want 0 (no cap) or at least %d (using %d)",
			*v, minShimMemoryMaxMiB, defaultShimMemoryMaxMiB)
	case *v > 0 && *v < minShimMemoryMaxMiB:
		return minShimMemoryMaxMiB, fmt.Errorf("shimMemoryMaxMiB %d: below %d, which it is raised to", *v, minShimMemoryMaxMiB)
	}
	return *v, nil
}
