// Package sealed carries a sandbox's secrets (its envd token, its env)
// from the controller to one node's agent through objects that many can
// read (a pod's annotations): each node's agent holds a private key and
// publishes its public key on its Node (sandlotv1.AnnotationClaimKey);
// the controller seals to that key. So the agent needs no right to read
// Secrets, which RBAC cannot narrow to a node: a node's credentials open
// only what was sealed for that node.
//
// HPKE (RFC 9180, crypto/hpke) in base mode with the hybrid
// ML-KEM-768 + X25519 KEM, HKDF-SHA256 and AES-256-GCM: a single-shot
// seal to a public key is exactly HPKE's purpose, and the hybrid KEM
// keeps a recorded annotation safe from a later quantum attacker.
package sealed

import (
	"crypto/hpke"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

var (
	kem  = hpke.MLKEM768X25519()
	kdf  = hpke.HKDFSHA256()
	aead = hpke.AES256GCM()
)

// Key is a node's private key.
type Key struct{ priv hpke.PrivateKey }

// NewKey draws a private key.
func NewKey() (*Key, error) {
	priv, err := kem.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("generate a sealing key: %w", err)
	}
	return &Key{priv: priv}, nil
}

// ParseKey reads a private key that Bytes wrote.
func ParseKey(b []byte) (*Key, error) {
	priv, err := kem.NewPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("parse the sealing key: %w", err)
	}
	return &Key{priv: priv}, nil
}

// Bytes is the private key's serialization.
func (k *Key) Bytes() ([]byte, error) { return k.priv.Bytes() }

// Public is the key others seal to.
func (k *Key) Public() []byte { return k.priv.PublicKey().Bytes() }

// Seal encrypts plaintext to the public key pub for one use, named by
// context (the pod and sandbox it is for): a sealed value copied to
// another context does not open.
func Seal(pub []byte, context string, plaintext []byte) ([]byte, error) {
	pk, err := kem.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("the node's sealing key: %w", err)
	}
	out, err := hpke.Seal(pk, kdf, aead, []byte(context), plaintext)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return out, nil
}

// ErrNotForThisKey: the value was sealed to another key or context, or
// altered.
var ErrNotForThisKey = errors.New("sealed for another node's key or another pod, or altered")

// Open decrypts what Seal sealed to this key in the same context.
func (k *Key) Open(context string, sealed []byte) ([]byte, error) {
	out, err := hpke.Open(k.priv, kdf, aead, []byte(context), sealed)
	if err != nil {
		return nil, ErrNotForThisKey
	}
	return out, nil
}

// Identity is what the controller seals for a node's agent: a sandbox's
// envd token and (for a claim of a warm pool VM) its env.
type Identity struct {
	Token string            `json:"token"`
	Env   map[string]string `json:"env,omitempty"`
}

// Context names the pod and sandbox a sealed Identity is for.
func Context(namespace, pod, sandbox string) string {
	return "sandlot.dev/identity/v1 " + namespace + "/" + pod + " " + sandbox
}

// SealIdentity seals id to the node key pub (base64, as the Node's
// annotation carries it) for context.
func SealIdentity(pub, context string, id Identity) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(pub)
	if err != nil {
		return nil, fmt.Errorf("the node's sealing key is not base64: %w", err)
	}
	plain, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	return Seal(key, context, plain)
}

// OpenIdentity opens what SealIdentity sealed to k for context.
func (k *Key) OpenIdentity(context string, box []byte) (Identity, error) {
	plain, err := k.Open(context, box)
	if err != nil {
		return Identity{}, err
	}
	var id Identity
	if err := json.Unmarshal(plain, &id); err != nil {
		return Identity{}, fmt.Errorf("sealed identity: %w", err)
	}
	return id, nil
}

// PublicBase64 is the public key as the Node's annotation carries it.
func (k *Key) PublicBase64() string { return base64.StdEncoding.EncodeToString(k.Public()) }
