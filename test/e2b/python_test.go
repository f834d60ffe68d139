package e2b

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/sandlot-dev/sandlot/internal/cluster"
)

// resolverIP is where the Python run's resolver listens: a loopback
// address of its own, port 53 (resolv.conf names no port).
const resolverIP = "127.0.0.153"

// pythonVenv is the virtualenv of test/e2b/python/requirements.lock
// (hack/e2b-venv.sh makes it the first time, from PyPI).
func pythonVenv(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(cluster.RepoRoot(), "hack", "e2b-venv.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/e2b-venv.sh (the pinned e2b and e2b-code-interpreter from PyPI; needs python3 with venv): %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// runPython runs the pytest suite of test/e2b/python with env. In domain
// mode it runs in a mount namespace of its own whose /etc/resolv.conf
// names a resolver answering every name under domain with the API
// Service's address (the SDK's Rust HTTP client resolves names itself:
// no hook in the process can do it, as resolve.mjs does for Node).
func runPython(t *testing.T, venv string, env []string, apiIP string, args ...string) {
	t.Helper()
	argv := append([]string{filepath.Join(venv, "bin", "python"), "-m", "pytest", "-v", "--durations=5"}, args...)
	if p := os.Getenv("SANDLOT_SDK_TESTS"); p != "" { // a developer's focus, as for the JS suite
		argv = append(argv, "-k", p)
	}
	if apiIP != "" {
		conf := serveDomain(t, apiIP)
		argv = append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$0" /etc/resolv.conf && exec "$@"`, conf}, argv...)
	}
	runSuite(t, "the Python E2B SDK tests", filepath.Join(cluster.RepoRoot(), "test", "e2b", "python"), env, argv[0], argv[1:]...)
}

// serveDomain answers A queries for domain and every name under it with
// ip (NXDOMAIN for the rest) at resolverIP:53 until the test ends, and
// writes the resolv.conf naming it.
func serveDomain(t *testing.T, ip string) string {
	t.Helper()
	if out, err := exec.Command("ip", "addr", "replace", resolverIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add %s dev lo: %v: %s", resolverIP, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", resolverIP+"/32", "dev", "lo").Run() })
	pc, err := net.ListenPacket("udp", net.JoinHostPort(resolverIP, "53"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		for _, qq := range q.Question {
			name := strings.ToLower(qq.Name)
			switch {
			case name != domain+"." && !strings.HasSuffix(name, "."+domain+"."):
				m.Rcode = dns.RcodeNameError
			case qq.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{A: net.ParseIP(ip).To4(),
					Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}})
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver "+resolverIP+"\noptions attempts:1 timeout:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}
