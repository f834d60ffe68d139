package store

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Data another node wrote reaches this node through a store others can
// write too (a bucket, a shared volume), and what a restore opens must be
// what a node of this cluster wrote. The nodes share a key (HMAC-SHA256):
// the writer signs the key's file list with every file's sha256 (the s3
// completion marker, the juicefs signed record) and the manifest's exact
// bytes, each bound to the key's name so that neither can be replayed
// under another; a reader checks the signatures, then every file's sha256
// as it downloads (s3) or reads (juicefs) it, before anything uses it.
// Data this node wrote itself is not hashed again when it is restored.

// ErrIntegrity is data from the shared store that is not what a node of
// this cluster wrote: a missing or bad signature, a signature by a key
// this node does not hold, or a file whose sha256 differs from the signed
// one. Its text is the reason the stage API and the agent report.
var ErrIntegrity = errors.New("IntegrityCheckFailed")

// What a signature covers; part of the signed message, so that a
// signature of one kind is never valid as another.
const (
	purposeMarker   = "marker"   // an s3 completion marker
	purposeManifest = "manifest" // a snapshot's manifest.json
	purposeRecord   = "record"   // a juicefs signed record
)

// minKeyBytes: shorter keys are refused (the chart generates 64).
const minKeyBytes = 32

// Keys sign what this node puts in a shared store and verify what it
// reads from it: the current key signs and verifies, the previous one
// (during a rotation) only verifies.
type Keys struct {
	keys []hmacKey // current first
}

type hmacKey struct {
	id     string
	secret []byte
}

// NewKeys makes Keys from the current key and an optional previous one.
func NewKeys(current, previous []byte) (*Keys, error) {
	k := &Keys{}
	for i, secret := range [][]byte{current, previous} {
		if i == 1 && len(secret) == 0 {
			break
		}
		if len(secret) < minKeyBytes {
			return nil, fmt.Errorf("store: manifest key: %d bytes, want at least %d", len(secret), minKeyBytes)
		}
		k.keys = append(k.keys, hmacKey{id: keyID(secret), secret: bytes.Clone(secret)})
	}
	return k, nil
}

// ReadKeys reads the current key from currentFile and the previous one
// from previousFile ("" or a missing file: none). Surrounding whitespace
// is not part of a key (a Secret written by hand often ends in a newline).
func ReadKeys(currentFile, previousFile string) (*Keys, error) {
	current, err := readKey(currentFile)
	if err != nil {
		return nil, err
	}
	var previous []byte
	if previousFile != "" {
		previous, err = readKey(previousFile)
		if errors.Is(err, fs.ErrNotExist) {
			previous, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return NewKeys(current, previous)
}

func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store: manifest key: %w", err)
	}
	return bytes.TrimSpace(b), nil
}

// IDs name the keys (never their bytes): the signing key, then the one
// also accepted.
func (k *Keys) IDs() []string {
	ids := make([]string, len(k.keys))
	for i, key := range k.keys {
		ids[i] = key.id
	}
	return ids
}

// keyID names a key in signatures: a reader tells "another key" from
// "tampered" and an operator sees which key signed.
func keyID(secret []byte) string {
	sum := sha256.Sum256(append([]byte("sandlot manifest key id\x00"), secret...))
	return hex.EncodeToString(sum[:6])
}

// sign is "hmac-sha256:<key id>:<mac>" of data as purpose for key.
func (k *Keys) sign(purpose, key string, data []byte) string {
	cur := k.keys[0]
	return "hmac-sha256:" + cur.id + ":" + hex.EncodeToString(mac(cur.secret, purpose, key, data))
}

// verify checks sig is a signature of data as purpose for key by one of
// the keys; every failure wraps ErrIntegrity.
func (k *Keys) verify(purpose, key string, data []byte, sig string) error {
	if sig == "" {
		return fmt.Errorf("%w: the %s of %s is not signed", ErrIntegrity, purpose, key)
	}
	alg, rest, _ := strings.Cut(sig, ":")
	id, sum, _ := strings.Cut(rest, ":")
	want, err := hex.DecodeString(sum)
	if alg != "hmac-sha256" || err != nil {
		return fmt.Errorf("%w: the %s of %s has a malformed signature", ErrIntegrity, purpose, key)
	}
	for _, c := range k.keys {
		if c.id != id {
			continue
		}
		if !hmac.Equal(mac(c.secret, purpose, key, data), want) {
			return fmt.Errorf("%w: the %s of %s does not match its signature by key %s (changed after it was signed, or signed for another key name)", ErrIntegrity, purpose, key, id)
		}
		return nil
	}
	return fmt.Errorf("%w: the %s of %s is signed by key %s, which this node does not hold (it accepts %s)",
		ErrIntegrity, purpose, key, id, strings.Join(k.IDs(), ", "))
}

// mac is HMAC-SHA256 over purpose, key and data, NUL-separated (neither
// purposes nor valid keys hold a NUL, so the message is unambiguous).
func mac(secret []byte, purpose, key string, data []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("sandlot-store-v1\x00" + purpose + "\x00" + key + "\x00"))
	h.Write(data)
	return h.Sum(nil)
}

// integrityErr is a file whose content is not the signed one.
func integrityErr(key string, f fileEntry, n int64, sum string) error {
	return fmt.Errorf("%w: %s of %s: got %d bytes with sha256 %s, signed for %d bytes with sha256 %s",
		ErrIntegrity, f.Path, key, n, sum, f.Size, f.SHA256)
}
