package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"
)

// Config is the node's shim configuration: a JSON file named by the
// runtime's `ConfigPath` option in containerd's config (as Kata does).
type Config struct {
	// Root holds one directory per pod: <root>/pods/<podUID>/control.sock
	// is the VM's control API (default /run/sandlot).
	Root string `json:"root"`
	// ImageDir caches one ext4 base disk per image digest (default
	// /var/lib/sandlot/images).
	ImageDir string `json:"imageDir"`
	// MemoryDir is a tmpfs directory for guest RAM (default /dev/shm).
	MemoryDir string `json:"memoryDir"`
	QEMU      string `json:"qemu"`
	Kernel    string `json:"kernel"`
	Initrd    string `json:"initrd"`
	// Modules is the guest's SANDLOT_MODULES boot parameter.
	Modules string `json:"modules"`
	// Accel forces kvm or tcg; "" detects.
	Accel string `json:"accel"`
	// DefaultMemoryMiB and DefaultVCPU size a VM whose pod does not say.
	DefaultMemoryMiB int `json:"defaultMemoryMiB"`
	DefaultVCPU      int `json:"defaultVCPU"`
	// LayerMiB sizes a cold-booted VM's writable layer (default 1024).
	LayerMiB int `json:"layerMiB"`
	// AgentSocket is the node agent's stage socket (package
	// nodeagent/stageapi). With it a restore asks the agent for its data
	// (downloaded first when another node wrote it); without it the pod's
	// restore-location annotation must be a directory on this node.
	AgentSocket string `json:"agentSocket,omitempty"`
}

// loadConfig reads the config named by a task's runtime options.
func loadConfig(opts *anypb.Any) (Config, error) {
	path, err := configPath(opts)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("sandlot shim config: %w", err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return Config{}, fmt.Errorf("sandlot shim config %s: %w", path, err)
		}
	}
	c.defaults()
	return c, c.validate()
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

func (c *Config) defaults() {
	if c.Root == "" {
		c.Root = "/run/sandlot"
	}
	if c.ImageDir == "" {
		c.ImageDir = "/var/lib/sandlot/images"
	}
	if c.MemoryDir == "" {
		c.MemoryDir = "/dev/shm"
	}
	if c.DefaultMemoryMiB == 0 {
		c.DefaultMemoryMiB = 512
	}
	if c.DefaultVCPU == 0 {
		c.DefaultVCPU = 1
	}
	if c.LayerMiB == 0 {
		c.LayerMiB = 1024
	}
}

func (c Config) validate() error {
	var errs []error
	for name, p := range map[string]string{"kernel": c.Kernel, "initrd": c.Initrd} {
		if p == "" {
			errs = append(errs, fmt.Errorf("sandlot shim config: %s is required", name))
		} else if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("sandlot shim config: %s: %w", name, err))
		}
	}
	for name, p := range map[string]string{"root": c.Root, "imageDir": c.ImageDir, "memoryDir": c.MemoryDir} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("sandlot shim config: %s %q is not an absolute path", name, p))
		}
	}
	return errors.Join(errs...)
}

// podDir is where a pod's control socket and VM files live.
func (c Config) podDir(podUID string) string { return filepath.Join(c.Root, "pods", podUID) }
