package network

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// checkScript runs checks inside a VM, in order, one line each
// ("<check>\t<result>"): "tcp H:P" (OK; REFUSED: a reset, as the filter
// refuses; TIMEOUT: dropped), "http H:P" (a GET: "OK <code> <body>" or
// tcp's errors) and "dns NAME" (its address through the VM's resolver).
// The default image has python3. No single quotes: it is shell-quoted.
const checkScript = `
import socket, sys
def conn(h, p):
    try:
        return socket.create_connection((h, int(p)), timeout=3), ""
    except ConnectionRefusedError:
        return None, "REFUSED"
    except socket.timeout:
        return None, "TIMEOUT"
    except OSError as e:
        return None, "ERR " + str(e)
def tcp(a):
    s, err = conn(*a.rsplit(":", 1))
    if s:
        s.close()
    return err or "OK"
def http(a):
    h, p = a.rsplit(":", 1)
    s, err = conn(h, p)
    if not s:
        return err
    b = b""
    try:
        s.sendall(("GET / HTTP/1.0\r\nHost: " + h + "\r\n\r\n").encode())
        while True:
            d = s.recv(4096)
            if not d:
                break
            b += d
    except OSError as e:
        return "ERR " + str(e)
    finally:
        s.close()
    head, _, body = b.decode(errors="replace").partition("\r\n\r\n")
    f = head.split(" ")
    return "OK " + (f[1] if len(f) > 1 else "?") + " " + " ".join(body.split())[:80]
def dns(name):
    try:
        return socket.gethostbyname(name)
    except OSError as e:
        return "ERR " + str(e)
for item in sys.argv[1:]:
    kind, arg = item.split(" ", 1)
    print(item + "\t" + {"tcp": tcp, "http": http, "dns": dns}[kind](arg), flush=True)
`

// want is a check and the result it must give ("...*": a prefix).
type want struct{ check, result string }

func refused(addr string) want { return want{"tcp " + addr, "REFUSED"} }

// refusedHTTP is refused for a second check of an address in one probe.
func refusedHTTP(addr string) want { return want{"http " + addr, "REFUSED"} }

func reached(ip string) want        { return want{"http " + ip + ":80", "OK 200 " + inet.Bodies[ip]} }
func resolves(name, ip string) want { return want{"dns " + name, ip} }

// unresolved: the VM's resolver answers no address for name.
func unresolved(name string) want { return want{"dns " + name, "ERR *"} }

// expect runs wants' checks in the sandbox, in order, and fails on any
// result that differs, listing them all.
func expect(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox, wants ...want) {
	t.Helper()
	got, raw := probe(t, k, sbx, wants)
	if err := mismatches(got, wants); err != nil {
		// What the guest's resolver is, for a failing name (or why it
		// cannot be read: the mismatches are reported either way).
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resolv, rerr := sbxtest.Exec(ctx, k, sbx, "cat /etc/resolv.conf")
		if rerr != nil {
			resolv = rerr.Error()
		}
		t.Fatalf("from sandbox %s (%s): %v\nits output:\n%s\nits /etc/resolv.conf:\n%s", sbx.Name, sbx.Status.PodIP, err, raw, resolv)
	}
}

func probe(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox, wants []want) (map[string]string, string) {
	t.Helper()
	args := []string{"python3", "-c", shq(checkScript)}
	seen := map[string]bool{}
	for _, w := range wants {
		if seen[w.check] {
			t.Fatalf("check %q twice in one probe", w.check)
		}
		seen[w.check] = true
		args = append(args, shq(w.check))
	}
	raw := sbxtest.EnvdRun(t, k, sbx, strings.Join(args, " ")+" 2>&1")
	got := map[string]string{}
	for _, l := range strings.Split(raw, "\n") {
		if check, result, ok := strings.Cut(l, "\t"); ok {
			got[check] = result
		}
	}
	return got, raw
}

func mismatches(got map[string]string, wants []want) error {
	var bad []string
	for _, w := range wants {
		r, ok := got[w.check]
		p, isPrefix := strings.CutSuffix(w.result, "*")
		if !ok || (isPrefix && !strings.HasPrefix(r, p)) || (!isPrefix && r != w.result) {
			bad = append(bad, fmt.Sprintf("%s: %q, want %q", w.check, r, w.result))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

// shq single-quotes s for the guest's shell.
func shq(s string) string {
	if strings.Contains(s, "'") {
		panic("network: a single quote in a guest command: " + s)
	}
	return "'" + s + "'"
}

// hostReaches: the test process (on the node) connects to each address,
// so a refusal from a VM is not for want of a listener.
func hostReaches(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		conn, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			t.Fatalf("from the host: %s: %v", a, err)
		}
		conn.Close()
	}
}
