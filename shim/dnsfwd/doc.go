// Package dnsfwd is the DNS forwarder a pod's shim runs for its microVM.
//
// E2B-style allowOut rules may name domains, but nftables filters
// addresses. The VM's resolver is pointed at this forwarder, which relays
// each query to the real upstreams and, when the question name is allowed,
// hands the A records of the answer to a Learner (the shim adds them to an
// nftables set with a timeout) before the VM sees the reply. So the VM can
// reach exactly the addresses it was told for an allowed name, for as long
// as the answer is valid, and nothing it merely guessed.
//
// Everything the VM sends is untrusted: queries are size-checked, parsed,
// rebuilt (only the question and EDNS0 OPT are forwarded, under a fresh ID)
// and answered within bounded time and concurrency.
package dnsfwd

import (
	"net/netip"
	"time"
)

// Learner opens the firewall for addresses the VM resolved.
type Learner interface {
	// Learn is called with the question name (lower case, no trailing
	// dot) and the IPv4 addresses (A records) of an answer whose name is
	// allowed, and how long they stay open. It runs before the reply is
	// sent to the VM and may be called concurrently.
	Learn(name string, addrs []netip.Addr, ttl time.Duration)
}

// Matcher reports whether a queried name (as asked, usually with a
// trailing dot) is opened by an allowOut domain.
type Matcher func(name string) bool
