// Package identity holds who the sandbox is: its ID, access token and
// environment. The host sets it over the control channel (at start and
// after every restore); the envd API reads it on each request.
package identity

import (
	"crypto/subtle"
	"maps"
	"sync"
)

// Identity is what the host pushes to a (re)started sandbox.
type Identity struct {
	SandboxID   string            `json:"sandboxID,omitempty"`
	AccessToken string            `json:"accessToken,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Hostname    string            `json:"hostname,omitempty"`
	// Network is applied by the control channel; it is kept here only so
	// the current identity can be read back.
	Network *Network `json:"network,omitempty"`
	// UnixNano is the host's clock, to step the guest clock after a restore.
	UnixNano int64 `json:"unixNano,omitempty"`
}

// Network is the guest NIC's identity (the pod's IP, gateway and MAC).
type Network struct {
	Interface string `json:"interface,omitempty"` // default eth0
	Address   string `json:"address"`             // CIDR, e.g. 10.88.0.5/24
	Gateway   string `json:"gateway,omitempty"`
	MAC       string `json:"mac,omitempty"`
}

// Store is the current identity, safe for concurrent use.
type Store struct {
	mu  sync.RWMutex
	cur Identity
}

// Set replaces the identity.
func (s *Store) Set(id Identity) {
	id.Env = maps.Clone(id.Env)
	s.mu.Lock()
	s.cur = id
	s.mu.Unlock()
}

// Get returns a copy of the identity.
func (s *Store) Get() Identity {
	s.mu.RLock()
	defer s.mu.RUnlock()
	id := s.cur
	id.Env = maps.Clone(id.Env)
	return id
}

// Env returns a copy of the sandbox's environment variables.
func (s *Store) Env() map[string]string { return s.Get().Env }

// CheckToken reports whether token opens the sandbox: any token when none
// is set (E2B's secure=false), else the same token, compared in constant time.
func (s *Store) CheckToken(token string) bool {
	s.mu.RLock()
	want := s.cur.AccessToken
	s.mu.RUnlock()
	if want == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}
