package network

import (
	"errors"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestAllowOutRules: with the internet off only what allowOut names
// passes: a CIDR at once (the metadata-like address, which the node's
// defaults deny: the refusals of TestClosedByDefault are the filter's),
// a domain or a wildcard's subdomain once the VM resolved it, and no
// other name however resolved. Live edits then open and close addresses
// for new connections within a second of NetworkApplied.
func TestAllowOutRules(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, tpl)
	s := newSandbox(t, k, "net-allow", sandlotv1.SandboxSource{Template: tpl}, &sandlotv1.SandboxNetwork{
		AllowInternetAccess: ptr.To(false), AllowOut: []string{"api.allowed.test", "*.wild.test", inet.IPMeta + "/32"}})
	expect(t, k, s,
		// Before any lookup: the domains' addresses are not open yet.
		refused(inet.IPPublic+":80"), refused(inet.IPAllowed+":80"), refused(inet.IPWild+":80"),
		reached(inet.IPMeta),
		resolves("api.allowed.test", inet.IPAllowed), reached(inet.IPAllowed),
		resolves("x.wild.test", inet.IPWild), reached(inet.IPWild),
		resolves("denied.test", inet.IPRange), refused(inet.IPRange+":80"),
		resolves("public.test", inet.IPPublic), refusedHTTP(inet.IPPublic+":80"),
	)
	startLoop(t, k, s)
	openLive(t, k, s)
	closeLive(t, k, s)
}

// loopScript connects to the metadata-like host (open throughout: the
// loop is alive) and to 203.0.113.5 (what the edits open and close) about
// every 50 ms for at most 150 s; the test internet records when each
// connection arrived.
const loopScript = `
import socket, time
end = time.time() + 150
while time.time() < end:
    for a in (("` + inet.IPMeta + `", 80), ("` + inet.IPRange + `", 80)):
        try:
            socket.create_connection(a, timeout=1).close()
        except OSError:
            pass
    time.sleep(0.05)
`

func startLoop(t *testing.T, k client.Client, s *sandlotv1.Sandbox) {
	t.Helper()
	sbxtest.EnvdRun(t, k, s, "nohup python3 -c "+shq(loopScript)+" >/dev/null 2>&1 & echo started")
	loopAlive(t, s.Status.PodIP, time.Now())
}

// loopAlive waits for a loop connection at the metadata-like host after
// `after`.
func loopAlive(t *testing.T, pod string, after time.Time) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, "the loop in the VM connecting to "+inet.IPMeta, func() error {
		if a := tnet.Arrivals(inet.IPMeta, pod); len(a) > 0 && a[len(a)-1].After(after) {
			return nil
		}
		return errors.New("no connection since " + after.Format(time.StampMilli))
	})
}

// openLive: the internet on again (allowInternetAccess unset) with
// 198.51.100.0/24 denied: 203.0.113.5 opens for new connections within a
// second of NetworkApplied; 198.51.100.10 stays refused.
func openLive(t *testing.T, k client.Client, s *sandlotv1.Sandbox) {
	t.Helper()
	pod := s.Status.PodIP
	if n := len(tnet.Arrivals(inet.IPRange, pod)); n > 0 {
		t.Fatalf("%d connections reached %s with the internet off", n, inet.IPRange)
	}
	gen, sent := editNetwork(t, k, s.Name, func(n *sandlotv1.SandboxNetwork) {
		n.DenyOut, n.AllowInternetAccess = []string{"198.51.100.0/24"}, nil
	})
	_, applied := waitApplied(t, k, s.Name, gen, fast)
	var first time.Time
	poll.Eventually(t, 30*time.Second, "a loop connection at "+inet.IPRange, func() error {
		if a := tnet.Arrivals(inet.IPRange, pod); len(a) > 0 {
			first = a[0]
			return nil
		}
		return errors.New("none yet")
	})
	t.Logf("internet on: NetworkApplied %v after the update; the first new connection through %v after it (%v after NetworkApplied)",
		applied.Sub(sent), first.Sub(sent), first.Sub(applied))
	if first.Before(sent) {
		t.Fatalf("a connection reached %s before the update, with the internet off", inet.IPRange)
	}
	if d := first.Sub(applied); d > time.Second {
		t.Fatalf("new connections to %s passed only %v after NetworkApplied turned True: want at most 1 s", inet.IPRange, d)
	}
	expect(t, k, s, refused(inet.IPPublic+":80"), reached(inet.IPRange), reached(inet.IPMeta))
}

// closeLive: 203.0.113.0/24 added to denyOut: no new connection to
// 203.0.113.5 passes later than a second after NetworkApplied, while the
// loop still runs.
func closeLive(t *testing.T, k client.Client, s *sandlotv1.Sandbox) {
	t.Helper()
	pod := s.Status.PodIP
	gen, sent := editNetwork(t, k, s.Name, func(n *sandlotv1.SandboxNetwork) { n.DenyOut = append(n.DenyOut, inet.RangeNet) })
	_, applied := waitApplied(t, k, s.Name, gen, fast)
	// The loop still running 2 s after: its attempts from 1 s to 2 s after
	// NetworkApplied (and before) are all in.
	loopAlive(t, pod, applied.Add(2*time.Second))
	a := tnet.Arrivals(inet.IPRange, pod)
	last := a[len(a)-1] // openLive saw at least one
	t.Logf("%s denied: NetworkApplied %v after the update; the last new connection through %v after it (%v after NetworkApplied)",
		inet.RangeNet, applied.Sub(sent), last.Sub(sent), last.Sub(applied))
	if d := last.Sub(applied); d > time.Second {
		t.Fatalf("new connections to %s still passed %v after NetworkApplied turned True: want at most 1 s", inet.IPRange, d)
	}
	expect(t, k, s, refused(inet.IPRange+":80"), reached(inet.IPMeta))
}

// TestRulesKeptAcrossPauseAndFork: a sandbox's denyOut holds after a
// pause and resume (a new pod) and in a child started from its snapshot
// with its rules (what the E2B facade's fork does), while the rest of the
// test internet stays reachable.
func TestRulesKeptAcrossPauseAndFork(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, tpl)
	s := newSandbox(t, k, "net-keep", sandlotv1.SandboxSource{Template: tpl},
		&sandlotv1.SandboxNetwork{DenyOut: []string{inet.IPPublic + "/32"}})
	wants := []want{refused(inet.IPPublic + ":80"), reached(inet.IPAllowed)}
	expect(t, k, s, wants...)
	s = pauseResume(t, k, s)
	expect(t, k, s, wants...)
	snap := sbxtest.Snapshot(t, k, "net-keep-snap", s.Name)
	child := newSandbox(t, k, "net-keep-child", sandlotv1.SandboxSource{Snapshot: snap.Name}, s.Spec.Network.DeepCopy())
	expect(t, k, child, wants...)
}
