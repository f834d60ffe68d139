package server

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandlot-dev/sandlot/guest/identity"
)

// The egress CA's certificate is a marked block of the system bundle
// (what curl, OpenSSL and Python read) and a file of its own (what
// NODE_EXTRA_CA_CERTS names). Each identity replaces the block: a
// restored memory, a snapshot's disk or a template's carries the CA of
// a shim that is gone, whose key went with it.
const (
	caBegin = "# sandlot egress CA (replaced at each restore): begin\n"
	caEnd   = "# sandlot egress CA: end\n"
	maxCA   = 16 << 10
)

// installEgressCA makes the guest trust the pod's egress CA.
func installEgressCA(certPEM string) error {
	if len(certPEM) > maxCA {
		return fmt.Errorf("egress CA: %d bytes, at most %d", len(certPEM), maxCA)
	}
	block, _ := pem.Decode([]byte(certPEM))
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("egress CA: not a PEM certificate")
	}
	if c, err := x509.ParseCertificate(block.Bytes); err != nil || !c.IsCA {
		return fmt.Errorf("egress CA: not a CA certificate (%v)", err)
	}
	if err := writeAtomic(identity.EgressCAFile, []byte(certPEM)); err != nil {
		return err
	}
	old, err := os.ReadFile(identity.SystemCABundle)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", identity.SystemCABundle, err)
	}
	return writeAtomic(identity.SystemCABundle, withCA(old, []byte(certPEM)))
}

// withCA is bundle without any earlier block, with cert's appended.
func withCA(bundle, cert []byte) []byte {
	for {
		i := bytes.Index(bundle, []byte(caBegin))
		if i < 0 {
			break
		}
		j := bytes.Index(bundle[i:], []byte(caEnd))
		if j < 0 {
			bundle = bundle[:i]
			break
		}
		bundle = append(bundle[:i:i], bundle[i+j+len(caEnd):]...)
	}
	out := append([]byte{}, bundle...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, caBegin...)
	out = append(out, bytes.TrimSpace(cert)...)
	return append(append(out, '\n'), caEnd...)
}

// writeAtomic replaces path (its directory made) by a rename: a reader
// sees the old bundle or the new one, never half of one.
func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	tmp := path + ".sandlot-tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("egress CA: %w", err)
	}
	return nil
}
