package network

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestAllowOutRules: with the internet off only what allowOut names
// passes: a CIDR at once (the metadata-like address, a platform denial
// the suite's values make openable: the refusals of TestClosedByDefault
// are the filter's), a domain or a wildcard's subdomain once the VM
// resolved it; no other name resolves (the resolver answers only what
// allowOut matches) and no other address opens. Live edits then open and close addresses
// for new connections by the time NetworkApplied turns True: the loop's
// next attempts after it (not a wall-clock bound) follow the edit.
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
		unresolved("denied.test"), refused(inet.IPRange+":80"),
		unresolved("public.test"), refusedHTTP(inet.IPPublic+":80"),
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

// lateTurns is how many turns of the loop a connection's arrival may be
// recorded after the next one's: the two hosts' listeners record them
// from goroutines of their own, which a loaded host may run late.
const lateTurns = 3

func startLoop(t *testing.T, k client.Client, s *sandlotv1.Sandbox) {
	t.Helper()
	sbxtest.EnvdRun(t, k, s, "nohup python3 -c "+shq(loopScript)+" >/dev/null 2>&1 & echo started")
	loopAlive(t, s.Status.PodIP, time.Now(), 1)
}

// loopAlive waits for n loop connections at the metadata-like host after
// `after` and returns when they arrived: each is one turn of the loop,
// whose attempt at 203.0.113.5 follows it.
func loopAlive(t *testing.T, pod string, after time.Time, n int) []time.Time {
	t.Helper()
	var since []time.Time
	poll.Eventually(t, 30*time.Second, fmt.Sprintf("the loop in the VM connecting to %s %d times", inet.IPMeta, n), func() error {
		since = since[:0]
		for _, a := range tnet.Arrivals(inet.IPMeta, pod) {
			if a.After(after) {
				since = append(since, a)
			}
		}
		if len(since) < n {
			return fmt.Errorf("%d connections since %s", len(since), after.Format(time.StampMilli))
		}
		return nil
	})
	return since
}

// openLive: the internet on again (allowInternetAccess unset) with
// 198.51.100.0/24 denied: 203.0.113.5 is open to the loop's attempts that
// follow NetworkApplied; 198.51.100.10 stays refused.
//
// Order, not time (here and in closeLive): a turn of the loop whose
// connection to the metadata-like host arrived after NetworkApplied was
// seen True tries 203.0.113.5 under the edit. A bound in seconds would
// measure this machine's load, not the filter.
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
	turns := loopAlive(t, pod, applied, lateTurns+2)
	t.Logf("internet on: NetworkApplied %v after the update; the first new connection through %v after it (%v after NetworkApplied)",
		applied.Sub(sent), first.Sub(sent), first.Sub(applied))
	if first.Before(sent) {
		t.Fatalf("a connection reached %s before the update, with the internet off", inet.IPRange)
	}
	if first.After(turns[lateTurns+1]) {
		t.Fatalf("new connections to %s passed only %v after NetworkApplied turned True, after the loop's turns at %v: not open when applied",
			inet.IPRange, first.Sub(applied), turns)
	}
	expect(t, k, s, refused(inet.IPPublic+":80"), reached(inet.IPRange), reached(inet.IPMeta))
}

// closeLive: 203.0.113.0/24 added to denyOut: no new connection to
// 203.0.113.5 passes in the loop's turns after NetworkApplied (watched
// while it runs a few more).
func closeLive(t *testing.T, k client.Client, s *sandlotv1.Sandbox) {
	t.Helper()
	pod := s.Status.PodIP
	gen, sent := editNetwork(t, k, s.Name, func(n *sandlotv1.SandboxNetwork) { n.DenyOut = append(n.DenyOut, inet.RangeNet) })
	_, applied := waitApplied(t, k, s.Name, gen, fast)
	turns := loopAlive(t, pod, applied, lateTurns+3)
	a := tnet.Arrivals(inet.IPRange, pod)
	last := a[len(a)-1] // openLive saw at least one
	t.Logf("%s denied: NetworkApplied %v after the update; the last new connection through %v after it (%v after NetworkApplied)",
		inet.RangeNet, applied.Sub(sent), last.Sub(sent), last.Sub(applied))
	if last.After(turns[lateTurns]) {
		t.Fatalf("new connections to %s still passed %v after NetworkApplied turned True, after the loop's turns at %v: not closed when applied",
			inet.IPRange, last.Sub(applied), turns)
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
