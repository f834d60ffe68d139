package nodeagent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sandlot-dev/sandlot/api/node"
)

// GuestDigest is the guest the node's shims boot VMs with: a digest of
// the kernel and the initramfs (the guest agent is inside it) the shim
// config at shimConfig names, both read under hostRoot (the node's /
// where the agent runs in a container, "" on the node). The agent
// publishes it on its Node (AnnotationGuest): a template's bases record
// the guest they captured, and an upgrade that brings a new guest gets
// them built again.
func GuestDigest(hostRoot, shimConfig string) (string, error) {
	b, err := os.ReadFile(filepath.Join(hostRoot, shimConfig))
	if err != nil {
		return "", fmt.Errorf("guest digest: shim config: %w", err)
	}
	var cfg node.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("guest digest: shim config %s: %w", shimConfig, err)
	}
	cfg.Defaults()
	h := sha256.New()
	for _, p := range []string{cfg.Kernel, cfg.Initrd} {
		sum, err := fileDigest(filepath.Join(hostRoot, p))
		if err != nil {
			return "", fmt.Errorf("guest digest: %w", err)
		}
		h.Write(sum)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func fileDigest(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return h.Sum(nil), nil
}
