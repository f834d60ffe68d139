package nodeagent

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// ClaimKeyPath is where the agent keeps its node's sealing key: under the
// shims' root (root's, on the node's /run), so an agent that restarts
// still opens what was sealed to it before, and a reboot (which ends
// every pool VM) draws a new one.
func ClaimKeyPath(sandlotRoot string) string { return filepath.Join(sandlotRoot, "claim.key") }

// LoadClaimKey reads the node's sealing key at path, or draws one and
// writes it there (0600, never through a link). Its public half goes on
// the Node (PublishFingerprint); the controller seals each sandbox's
// token and env to it, so the agent reads no Secret.
func LoadClaimKey(path string) (*sealed.Key, error) {
	if k, err := readClaimKey(path); !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	k, err := sealed.NewKey()
	if err != nil {
		return nil, err
	}
	raw, err := k.Bytes()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("the sealing key's directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return readClaimKey(path) // another agent process wrote it first
	}
	if err != nil {
		return nil, fmt.Errorf("write the sealing key: %w", err)
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return nil, fmt.Errorf("write the sealing key %s: %w", path, err)
	}
	return k, f.Close()
}

func readClaimKey(path string) (*sealed.Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("the sealing key %s: %w", path, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the sealing key %s must be a regular file only its owner reads (mode %v)", path, st.Mode())
	}
	raw, err := io.ReadAll(f) // from the file opened, not its path again
	if err != nil {
		return nil, fmt.Errorf("read the sealing key %s: %w", path, err)
	}
	return sealed.ParseKey(raw)
}

// openClaim opens a claim's sealed token and env: sealed to this node's
// key for this pod and sandbox, or nothing.
func openClaim(key *sealed.Key, pod *corev1.Pod, claim sandlotv1.PoolClaim) (sealed.Identity, error) {
	if len(claim.Sealed) == 0 {
		return sealed.Identity{}, fmt.Errorf("the claim of pod %s by %s carries no sealed token (a controller older than the agent wrote it): delete the sandbox and create it again",
			pod.Name, claim.Sandbox)
	}
	if key == nil {
		return sealed.Identity{}, fmt.Errorf("this agent has no sealing key to open the claim of pod %s", pod.Name)
	}
	id, err := key.OpenIdentity(sealed.Context(pod.Namespace, pod.Name, claim.Sandbox), claim.Sealed)
	if err != nil {
		return sealed.Identity{}, fmt.Errorf("the claim of pod %s by %s: %w", pod.Name, claim.Sandbox, err)
	}
	return id, nil
}

// builderToken is the envd token the controller sealed to this node on
// a template builder's pod.
func builderToken(key *sealed.Key, pod *corev1.Pod, sandbox string) (string, error) {
	v := pod.Annotations[sandlotv1.AnnotationSealedIdentity]
	if v == "" {
		return "", fmt.Errorf("builder pod %s carries no sealed token (%s)", pod.Name, sandlotv1.AnnotationSealedIdentity)
	}
	box, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", fmt.Errorf("builder pod %s's sealed token: %w", pod.Name, err)
	}
	if key == nil {
		return "", fmt.Errorf("this agent has no sealing key to open builder pod %s's token", pod.Name)
	}
	id, err := key.OpenIdentity(sealed.Context(pod.Namespace, pod.Name, sandbox), box)
	if err != nil {
		return "", fmt.Errorf("builder pod %s's token: %w", pod.Name, err)
	}
	return id.Token, nil
}
