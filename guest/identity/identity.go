// Package identity holds who the sandbox is: its ID, access token and
// environment. The host sets it over the control channel (at start and
// after every restore); the envd API reads it on each request.
//
// Access fails closed: until the host has pushed an identity, and while
// the pushed one carries no token, every call is refused — unless that
// identity explicitly says the sandbox is open (Open, E2B's secure=false).
// An identity the host forgot to fill in must not leave the API open.
package identity

import (
	"crypto/subtle"
	"maps"
	"slices"
	"sync"
)

// Identity is what the host pushes to a (re)started sandbox.
type Identity struct {
	SandboxID string `json:"sandboxID,omitempty"`
	// AccessToken is what callers must send as X-Access-Token (and what
	// /files signatures are made with). When set, it is required even if
	// Open is true: a token always wins.
	AccessToken string `json:"accessToken,omitempty"`
	// Open admits every caller when AccessToken is empty: E2B's
	// secure=false sandbox. It must be said explicitly: an empty token
	// without Open refuses every call, so an identity pushed without its
	// token (a warm pool VM before its claim, a host bug) stays closed.
	Open     bool              `json:"open,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Hostname string            `json:"hostname,omitempty"`
	// Network is applied by the control channel; it is kept here only so
	// the current identity can be read back.
	Network *Network `json:"network,omitempty"`
	// UnixNano is the host's clock, to step the guest clock after a restore.
	UnixNano int64 `json:"unixNano,omitempty"`
	// Volumes are the sandbox's E2B volumes, NFS exports of its shim's
	// server at VolumeServer; the guest mounts them again at every
	// identity (after a restore the server is another process, maybe on
	// another node, and the old file handles are gone).
	Volumes      []Volume `json:"volumes,omitempty"`
	VolumeServer string   `json:"volumeServer,omitempty"`
	// EgressCA is the PEM certificate of the pod's egress proxy CA (its
	// key stays on the host): the guest trusts it in place of the one a
	// restored memory or a template's disk carries.
	EgressCA string `json:"egressCA,omitempty"`
}

// Volume is one NFS export mounted at Path.
type Volume struct {
	Export string `json:"export"`
	Path   string `json:"path"`
}

// Network is the guest NIC's identity (the pod's IP, gateway and MAC).
type Network struct {
	Interface string `json:"interface,omitempty"` // default eth0
	Address   string `json:"address"`             // CIDR, e.g. 10.88.0.5/24
	Gateway   string `json:"gateway,omitempty"`
	MAC       string `json:"mac,omitempty"`
	// DNS is the guest's resolv.conf (nil: left as it is).
	DNS *DNS `json:"dns,omitempty"`
}

// DNS is a resolv.conf: the host's forwarder and the pod's search path.
type DNS struct {
	Nameservers []string `json:"nameservers"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// Store is the current identity, safe for concurrent use.
// Its zero value holds no identity: it refuses every token until Set.
type Store struct {
	mu  sync.RWMutex
	cur Identity
	set bool // the host has pushed an identity
}

// Set replaces the identity.
func (s *Store) Set(id Identity) {
	id.Env = maps.Clone(id.Env)
	id.Volumes = slices.Clone(id.Volumes)
	s.mu.Lock()
	s.cur, s.set = id, true
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

// Access is the current access token and whether the sandbox is open to
// any caller (only with no token: a token always wins). Both are zero
// while no identity is set, which refuses everything.
func (s *Store) Access() (token string, open bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.set {
		return "", false
	}
	return s.cur.AccessToken, s.cur.AccessToken == "" && s.cur.Open
}

// CheckToken reports whether token opens the sandbox: the identity's
// token, compared in constant time; any token when the identity has none
// and says Open (E2B's secure=false); nothing before an identity is set
// or when it has neither a token nor Open.
func (s *Store) CheckToken(token string) bool {
	want, open := s.Access()
	if open {
		return true
	}
	if want == "" {
		return false // fail closed: no identity yet, or one without a token
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

// Where the guest keeps the egress CA: its own file and the system
// bundle it joins.
const (
	EgressCAFile   = "/usr/local/share/ca-certificates/sandlot-egress.crt"
	SystemCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// EgressCAEnv is what a process's environment gets with an egress CA,
// unless the sandbox sets them: Python's requests and Node read their
// own roots otherwise.
func EgressCAEnv() map[string]string {
	return map[string]string{"SSL_CERT_FILE": SystemCABundle, "REQUESTS_CA_BUNDLE": SystemCABundle,
		"NODE_EXTRA_CA_CERTS": EgressCAFile}
}
