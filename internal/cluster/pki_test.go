package cluster

// Longer than 500 lines: the PKI's checks against a real API server, one per identity, beside each other.

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

func testPKIConfig(t *testing.T) PKIConfig {
	return PKIConfig{Dir: filepath.Join(t.TempDir(), "pki"), APIServer: "10.246.0.1",
		Nodes: []NodeIdentity{{Name: "node-1", IP: "10.246.1.1"}, {Name: "node-2", IP: "10.246.2.1"}}}
}

// wantCert is what one certificate must say.
type wantCert struct {
	path, key string
	cn, org   string
	usage     x509.ExtKeyUsage
	dns, ips  []string
}

func TestPKICertificates(t *testing.T) {
	c := testPKIConfig(t)
	p, err := GeneratePKI(c)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	ca := readTestCert(t, p.CACert)
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 || ca.NotAfter.Before(time.Now().Add(9*365*24*time.Hour)) {
		t.Errorf("CA: IsCA=%v KeyUsage=%v NotAfter=%v", ca.IsCA, ca.KeyUsage, ca.NotAfter)
	}
	roots.AddCert(ca)
	for _, w := range wantCerts(t, p) {
		checkTestCert(t, roots, w)
	}
}

func wantCerts(t *testing.T, p *PKI) []wantCert {
	cc := func(kubeconfig, cn, org string) wantCert {
		cfg, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		a := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
		return wantCert{path: a.ClientCertificate, key: a.ClientKey, cn: cn, org: org, usage: x509.ExtKeyUsageClientAuth}
	}
	ws := []wantCert{
		{path: p.APIServerCert, key: p.APIServerKey, cn: "kube-apiserver", usage: x509.ExtKeyUsageServerAuth,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips: []string{"10.246.0.1", "127.0.0.1", "10.0.0.1"}},
		{path: p.KubeletClientCert, key: p.KubeletClientKey, cn: "kube-apiserver-kubelet-client", org: "system:masters",
			usage: x509.ExtKeyUsageClientAuth},
		cc(p.Admin, "sandlot-admin", "system:masters"),
		cc(p.ControllerManager, "system:kube-controller-manager", ""),
		cc(p.Scheduler, "system:kube-scheduler", ""),
		cc(p.Proxy, "system:kube-proxy", ""),
	}
	for name, ip := range map[string]string{"node-1": "10.246.1.1", "node-2": "10.246.2.1"} {
		k := p.Kubelets[name]
		ws = append(ws, cc(k.Kubeconfig, "system:node:"+name, "system:nodes"),
			wantCert{path: k.ServingCert, key: k.ServingKey, cn: "system:node:" + name, org: "system:nodes",
				usage: x509.ExtKeyUsageServerAuth, dns: []string{name}, ips: []string{ip, "127.0.0.1"}})
	}
	return ws
}

func checkTestCert(t *testing.T, roots *x509.CertPool, w wantCert) {
	t.Helper()
	cert := readTestCert(t, w.path)
	name := filepath.Base(w.path)
	opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{w.usage}}
	if _, err := cert.Verify(opts); err != nil {
		t.Errorf("%s does not chain to the CA for %v: %v", name, w.usage, err)
	}
	var orgs []string
	if w.org != "" {
		orgs = []string{w.org}
	}
	if cert.Subject.CommonName != w.cn || !slices.Equal(cert.Subject.Organization, orgs) {
		t.Errorf("%s: subject %s, want CN=%s O=%v", name, cert.Subject, w.cn, orgs)
	}
	var ips []string
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(cert.DNSNames, w.dns) || !slices.Equal(ips, w.ips) {
		t.Errorf("%s: SANs %v %v, want %v %v", name, cert.DNSNames, ips, w.dns, w.ips)
	}
	for _, host := range append(slices.Clone(w.dns), w.ips...) {
		if err := cert.VerifyHostname(host); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{w.usage}) || cert.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("%s: ExtKeyUsage %v KeyUsage %v, want [%v] DigitalSignature", name, cert.ExtKeyUsage, cert.KeyUsage, w.usage)
	}
	if d := time.Until(cert.NotAfter); d < 364*24*time.Hour || d > 366*24*time.Hour {
		t.Errorf("%s: expires in %v, want a year", name, d)
	}
	if _, err := loadPair(w.path, w.key); err != nil {
		t.Errorf("key does not match: %v", err)
	}
	checkTestMode(t, w.key, 0o600)
}

func readTestCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no CERTIFICATE PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cert
}

func checkTestMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != want {
		t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), want)
	}
}

func TestPKIFiles(t *testing.T) {
	p, err := GeneratePKI(testPKIConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	checkTestMode(t, p.Dir, 0o700)
	for _, key := range []string{p.CAKey, p.SAKey} {
		checkTestMode(t, key, 0o600)
	}
	if err := checkSAKeys(p.SAPub, p.SAKey); err != nil {
		t.Error(err)
	}
	if b, _ := os.ReadFile(p.SAKey); !bytes.HasPrefix(b, []byte("-----BEGIN RSA PRIVATE KEY-----")) {
		t.Errorf("%s is not a PKCS#1 RSA key", p.SAKey)
	}
	if len(p.Kubelets) != 2 {
		t.Errorf("Kubelets: %v", p.Kubelets)
	}
}

func TestPKIKubeconfigs(t *testing.T) {
	p, err := GeneratePKI(testPKIConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigs := []string{p.Admin, p.ControllerManager, p.Scheduler, p.Proxy,
		p.Kubelets["node-1"].Kubeconfig, p.Kubelets["node-2"].Kubeconfig}
	for _, path := range kubeconfigs {
		cfg, err := clientcmd.LoadFromFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if cfg.CurrentContext != "sandlot" || ctx == nil || ctx.Cluster != "sandlot" {
			t.Fatalf("%s: current context %q = %+v", path, cfg.CurrentContext, ctx)
		}
		cl, a := cfg.Clusters["sandlot"], cfg.AuthInfos[ctx.AuthInfo]
		if cl.Server != "https://10.246.0.1:6443" || cl.CertificateAuthority != p.CACert {
			t.Errorf("%s: cluster %+v", path, cl)
		}
		for _, f := range []string{a.ClientCertificate, a.ClientKey} {
			if !filepath.IsAbs(f) || filepath.Dir(f) != p.Dir {
				t.Errorf("%s: %q is not an absolute path in %s", path, f, p.Dir)
			}
		}
		// The same through the path every client takes.
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if rc.Host != cl.Server || rc.TLSClientConfig.CertFile != a.ClientCertificate || rc.TLSClientConfig.CAFile != p.CACert {
			t.Errorf("%s: rest config %s %+v", path, rc.Host, rc.TLSClientConfig)
		}
	}
}

// snapshotDir is every file's contents and mtime.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		info, _ := e.Info()
		out[e.Name()] = fmt.Sprintf("%s %x", info.ModTime(), b)
	}
	return out
}

func TestPKIReuse(t *testing.T) {
	c := testPKIConfig(t)
	p1, err := GeneratePKI(c)
	if err != nil {
		t.Fatal(err)
	}
	before := snapshotDir(t, p1.Dir)
	// Same config, relative Dir: still the same PKI.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	c2 := c
	c2.Dir = rel
	if _, err := GeneratePKI(c2); err != nil {
		t.Fatal(err)
	}
	if after := snapshotDir(t, p1.Dir); !mapsEqual(before, after) {
		t.Errorf("the second GeneratePKI with the same config rewrote files")
	}
	for _, load := range []PKIConfig{c, {Dir: c.Dir}} {
		p, err := LoadPKI(load)
		if err != nil {
			t.Fatalf("LoadPKI(%+v): %v", load, err)
		}
		if fmt.Sprint(*p) != fmt.Sprint(*p1) {
			t.Errorf("LoadPKI = %+v, want %+v", *p, *p1)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestPKIRegenerates(t *testing.T) {
	c := testPKIConfig(t)
	p, err := GeneratePKI(c)
	if err != nil {
		t.Fatal(err)
	}
	// Applied one after the other: each must differ from the one before.
	changes := []struct {
		what   string
		change func(*PKIConfig)
	}{
		{"APIServer", func(c *PKIConfig) { c.APIServer = "10.246.0.2" }},
		{"node removed", func(c *PKIConfig) { c.Nodes = c.Nodes[:1] }},
		{"node IP", func(c *PKIConfig) { c.Nodes = []NodeIdentity{{Name: "node-1", IP: "10.246.9.1"}} }},
		{"node renamed", func(c *PKIConfig) { c.Nodes = []NodeIdentity{{Name: "node-9", IP: "10.246.9.1"}} }},
	}
	for _, ch := range changes {
		what, change := ch.what, ch.change
		ca, _ := os.ReadFile(p.CACert)
		changed := c
		change(&changed)
		if _, err := LoadPKI(changed); err == nil {
			t.Errorf("%s: LoadPKI accepted a PKI made for another config", what)
		}
		if p, err = GeneratePKI(changed); err != nil {
			t.Fatal(err)
		}
		if ca2, _ := os.ReadFile(p.CACert); bytes.Equal(ca, ca2) {
			t.Errorf("%s: GeneratePKI reused the CA", what)
		}
		if _, err := LoadPKI(changed); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		c = changed
	}
}

func TestPKIIncomplete(t *testing.T) {
	c := testPKIConfig(t)
	p, err := GeneratePKI(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.Kubelets["node-2"].ServingKey); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPKI(c); err == nil || !strings.Contains(err.Error(), "kubelet-node-2-serving.key") {
		t.Errorf("LoadPKI with a key missing: %v", err)
	}
	if _, err := LoadPKI(PKIConfig{Dir: t.TempDir()}); err == nil {
		t.Errorf("LoadPKI of an empty dir succeeded")
	}
	// A missing file makes GeneratePKI start over.
	if _, err := GeneratePKI(c); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPKI(c); err != nil {
		t.Error(err)
	}
}

func TestPKIRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []PKIConfig{
		{APIServer: "10.0.0.1"},
		{Dir: dir, APIServer: "apiserver.local"},
		{Dir: dir, APIServer: "10.0.0.1", Nodes: []NodeIdentity{{Name: "Node_1", IP: "10.0.0.2"}}},
		{Dir: dir, APIServer: "10.0.0.1", Nodes: []NodeIdentity{{Name: "n", IP: "10.0.0.2"}, {Name: "n", IP: "10.0.0.3"}}},
		{Dir: dir, APIServer: "10.0.0.1", Nodes: []NodeIdentity{{Name: "n", IP: ""}}},
	} {
		if _, err := GeneratePKI(c); err == nil {
			t.Errorf("GeneratePKI(%+v) succeeded", c)
		}
	}
}

// TestPKIKubeAPIServer: a real kube-apiserver serves with the PKI and
// authenticates every client identity by its cert.
func TestPKIKubeAPIServer(t *testing.T) {
	etcdBin, apiserverBin := pkiTestBinaries(t)
	p, err := GeneratePKI(PKIConfig{Dir: filepath.Join(t.TempDir(), "pki"), APIServer: "127.0.0.1",
		Nodes: []NodeIdentity{{Name: "node-1", IP: "127.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	etcdURL := startTestEtcd(t, etcdBin)
	port := pkiFreePort(t)
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	apiserver := startTestProcess(t, "kube-apiserver", apiserverBin,
		"--etcd-servers="+etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		// 127.0.0.1 is only allowed as advertise address without the lease reconciler.
		"--endpoint-reconciler-type=none", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+p.APIServerCert, "--tls-private-key-file="+p.APIServerKey, "--client-ca-file="+p.CACert,
		"--service-account-issuer="+server, "--service-account-key-file="+p.SAPub,
		"--service-account-signing-key-file="+p.SAKey, "--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC", "--kubelet-client-certificate="+p.KubeletClientCert,
		"--kubelet-client-key="+p.KubeletClientKey, "--kubelet-certificate-authority="+p.CACert)
	admin := pkiTestClient(t, p.Admin, server)
	apiserver.waitFor(t, 90*time.Second, "/readyz", func() error {
		_, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err
	})
	ns, err := admin.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(ns.Items) == 0 {
		t.Fatalf("admin lists namespaces: %v (%d)", err, len(ns.Items))
	}
	for path, want := range map[string][]string{
		p.Admin:                         {"sandlot-admin", "system:masters"},
		p.ControllerManager:             {"system:kube-controller-manager"},
		p.Scheduler:                     {"system:kube-scheduler"},
		p.Proxy:                         {"system:kube-proxy"},
		p.Kubelets["node-1"].Kubeconfig: {"system:node:node-1", "system:nodes"},
	} {
		checkTestIdentity(t, pkiTestClient(t, path, server), filepath.Base(path), want)
	}
}

// checkTestIdentity asks the API server who the client is.
func checkTestIdentity(t *testing.T, cs *kubernetes.Clientset, name string, want []string) {
	t.Helper()
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(),
		&authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("%s: SelfSubjectReview: %v", name, err)
		return
	}
	u := r.Status.UserInfo
	if u.Username != want[0] || !slices.Contains(u.Groups, "system:authenticated") {
		t.Errorf("%s: authenticated as %s %v, want %s", name, u.Username, u.Groups, want[0])
	}
	for _, g := range want[1:] {
		if !slices.Contains(u.Groups, g) {
			t.Errorf("%s: groups %v lack %s", name, u.Groups, g)
		}
	}
}

// pkiTestClient uses kubeconfig with its server replaced: the test's API
// server listens on a free port, not 6443.
func pkiTestClient(t *testing.T, kubeconfig, server string) *kubernetes.Clientset {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags(server, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func pkiTestBinaries(t *testing.T) (etcd, apiserver string) {
	cache := os.Getenv("SANDLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
	}
	dir := filepath.Join(cache, "k8s", "v1.37.2")
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s not found in %s: run `make envtest-assets` (%v)", name, dir, err)
		}
	}
	return filepath.Join(dir, "etcd"), filepath.Join(dir, "kube-apiserver")
}

func startTestEtcd(t *testing.T, bin string) string {
	dir := t.TempDir()
	client := fmt.Sprintf("http://127.0.0.1:%d", pkiFreePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", pkiFreePort(t))
	etcd := startTestProcess(t, "etcd", bin, "--name=default", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer, "--unsafe-no-fsync")
	etcd.waitFor(t, 30*time.Second, "/health", func() error {
		return httpOK(client + "/health")
	})
	return client
}

// pkiFreePort is a port nothing listens on right now (the process that
// binds it next may lose a race, which a test rerun fixes).
func pkiFreePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testProcess is a process killed when the test ends.
type testProcess struct {
	name string
	done chan error
}

// startTestProcess logs to a file that the test prints if it fails.
// (The harness's startProc does more; this test keeps to its own file.)
func startTestProcess(t *testing.T, name, bin string, args ...string) *testProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, and killed if the test binary dies.
	// (Pdeathsig fires when the starting thread ends; nothing in this
	// test locks a goroutine to a thread and lets it end.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	logf.Close()
	p := &testProcess{name: name, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log (end):\n%s", name, b[max(0, len(b)-4000):])
		}
	})
	return p
}

func (p *testProcess) waitFor(t *testing.T, timeout time.Duration, what string, ok func() error) {
	t.Helper()
	poll.Eventually(t, timeout, p.name+": "+what, func() error {
		err := ok()
		if err == nil {
			return nil
		}
		select {
		case werr := <-p.done:
			p.done <- werr // for the cleanup
			return poll.Stop(fmt.Errorf("%s exited (%v) before %s", p.name, werr, what))
		default:
			return err
		}
	})
}
