package shim

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// TestResolvConfOf: the pod's resolv.conf (what containerd wrote from
// CRI's DNSConfig) gives the forwarder's upstreams and the guest's search
// path; the guest's resolver is the forwarder.
func TestResolvConfOf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	conf := "nameserver 10.96.0.10\nnameserver 10.96.0.11\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{Mounts: []specs.Mount{{Destination: "/etc/hostname", Source: "/x"}, {Destination: "/etc/resolv.conf", Source: path}}}
	d, err := resolvConfOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.96.0.10:53", "10.96.0.11:53"}; !slices.Equal(d.Servers, want) {
		t.Errorf("servers %v, want %v", d.Servers, want)
	}
	g := guestDNS(d)
	if g == nil || !slices.Equal(g.Nameservers, []string{resolverAddr.String()}) || len(g.Search) != 3 || !slices.Equal(g.Options, []string{"ndots:5"}) {
		t.Errorf("guest DNS %+v, want the forwarder, the pod's 3 search domains and ndots:5", g)
	}
	if d, err := resolvConfOf(&specs.Spec{}); err != nil || guestDNS(d) != nil {
		t.Errorf("no resolv.conf mount: %+v %v, want no resolver and no error", d, err)
	}
	spec.Mounts[1].Source = filepath.Join(t.TempDir(), "missing")
	if _, err := resolvConfOf(spec); err == nil {
		t.Error("an unreadable resolv.conf was not an error")
	}
}
