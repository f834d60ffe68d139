package shim

import (
	"net/netip"
	"sync"
	"time"
)

// learnedNames is which allowOut domain each learned address answered,
// until its TTL: the egress tunnel asks its SOCKS5 proxy for a name
// (E2B: domain-matched flows use remote DNS), and the policy check knows
// the address was a domain's answer. Bounded as the filter's set is.
type learnedNames struct {
	mu sync.Mutex
	m  map[netip.Addr]learnedName
}

type learnedName struct {
	name  string
	until time.Time
}

const maxLearnedNames = 16384

func (l *learnedNames) add(name string, addrs []netip.Addr, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[netip.Addr]learnedName{}
	}
	now := time.Now()
	if len(l.m)+len(addrs) > maxLearnedNames {
		for a, n := range l.m {
			if now.After(n.until) {
				delete(l.m, a)
			}
		}
	}
	for _, a := range addrs {
		if len(l.m) >= maxLearnedNames {
			return // a guest resolving endless names fills only its own map
		}
		l.m[a] = learnedName{name: name, until: now.Add(ttl)}
	}
}

// lookup is the name a still-valid answer gave a.
func (l *learnedNames) lookup(a netip.Addr) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.m[a]
	if !ok || time.Now().After(n.until) {
		return "", false
	}
	return n.name, true
}
