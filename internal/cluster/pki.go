package cluster

// Longer than 500 lines: the cluster's whole PKI in one place: the CA, every leaf and kubeconfig, and their checks, so one file shows who may do what.

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
)

// PKIConfig says who the certificates are for.
type PKIConfig struct {
	Dir       string // everything is written here (0700 dir, keys 0600)
	APIServer string // IP clients use, e.g. "10.246.0.1"; the server URL is https://<APIServer>:6443
	Nodes     []NodeIdentity
}

// NodeIdentity is a kubelet: its node name (system:node:<Name>) and the IP
// it serves on.
type NodeIdentity struct{ Name, IP string }

// PKI holds the paths of everything GeneratePKI wrote.
type PKI struct {
	Dir                                 string
	CACert, CAKey                       string
	APIServerCert, APIServerKey         string // serving cert
	KubeletClientCert, KubeletClientKey string // apiserver → kubelet client (O=system:masters)
	SAPub, SAKey                        string // service-account token key pair (RSA 2048)
	// Kubeconfigs, server https://<APIServer>:6443.
	Admin, ControllerManager, Scheduler, Proxy string
	Kubelets                                   map[string]KubeletPKI // by node name
}

// KubeletPKI is one node's kubeconfig (client cert CN=system:node:<name>,
// O=system:nodes) and serving cert (SANs: node IP, 127.0.0.1, node name).
type KubeletPKI struct{ Kubeconfig, ServingCert, ServingKey string }

const (
	// pkiAPIServerPort is the port in every kubeconfig's server URL.
	pkiAPIServerPort = 6443
	// pkiServiceIP is the kubernetes Service's ClusterIP (the first
	// address of the 10.0.0.0/24 service CIDR): pods dial it, so the
	// serving cert must name it.
	pkiServiceIP = "10.0.0.1"

	pkiClusterName = "sandlot"
	pkiConfigFile  = "pki.json"
	// pkiLayout is stored in pki.json: bump it when the files or their
	// contents change so that older directories are regenerated.
	pkiLayout    = 1
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// pkiRenewBefore: GeneratePKI regenerates a PKI that would expire
	// within this, so a reused one never dies during a test run.
	pkiRenewBefore = 7 * 24 * time.Hour
	// pkiBackdate covers clock differences between processes reading
	// a freshly generated cert.
	pkiBackdate = time.Hour
)

// GeneratePKI writes a CA, serving and client certificates, the
// service-account key pair and kubeconfigs into c.Dir. If c.Dir already
// holds a complete, valid PKI for the same config (pki.json), it is reused
// as is; otherwise everything is regenerated.
func GeneratePKI(c PKIConfig) (*PKI, error) {
	c, err := c.normalize()
	if err != nil {
		return nil, err
	}
	p := c.layout()
	if p.check(c, pkiRenewBefore) == nil {
		return p, nil
	}
	if err := p.generate(c); err != nil {
		return nil, fmt.Errorf("generate PKI in %s: %w", p.Dir, err)
	}
	return p, nil
}

// LoadPKI returns the paths of the PKI GeneratePKI wrote into c.Dir, without
// regenerating. It fails if a file is missing or invalid, or if the PKI was
// made for another config. A config with only Dir set takes the stored one.
func LoadPKI(c PKIConfig) (*PKI, error) {
	if c.APIServer == "" && len(c.Nodes) == 0 {
		stored, err := readPKIConfig(c.Dir)
		if err != nil {
			return nil, err
		}
		c.APIServer, c.Nodes = stored.APIServer, stored.Nodes
	}
	c, err := c.normalize()
	if err != nil {
		return nil, err
	}
	p := c.layout()
	if err := p.check(c, 0); err != nil {
		return nil, fmt.Errorf("load PKI: %w", err)
	}
	return p, nil
}

// normalize validates c and returns a copy with an absolute Dir (the
// kubeconfigs embed absolute paths) and canonical IPs (so that spellings
// like "::ffff:10.0.0.1" or upper-case IPv6 do not defeat reuse).
func (c PKIConfig) normalize() (PKIConfig, error) {
	if c.Dir == "" {
		return c, errors.New("PKIConfig.Dir is empty")
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return c, fmt.Errorf("PKIConfig.Dir: %w", err)
	}
	apiserver, err := canonicalIP(c.APIServer)
	if err != nil {
		return c, fmt.Errorf("PKIConfig.APIServer: %w", err)
	}
	out := PKIConfig{Dir: dir, APIServer: apiserver, Nodes: make([]NodeIdentity, 0, len(c.Nodes))}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		// The name becomes part of file names and of a DNS SAN.
		if errs := validation.IsDNS1123Subdomain(n.Name); len(errs) > 0 {
			return c, fmt.Errorf("node name %q: %v", n.Name, errs)
		}
		if seen[n.Name] {
			return c, fmt.Errorf("node name %q appears twice", n.Name)
		}
		seen[n.Name] = true
		ip, err := canonicalIP(n.IP)
		if err != nil {
			return c, fmt.Errorf("node %s IP: %w", n.Name, err)
		}
		out.Nodes = append(out.Nodes, NodeIdentity{Name: n.Name, IP: ip})
	}
	return out, nil
}

func canonicalIP(s string) (string, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", err
	}
	if a.Zone() != "" {
		return "", fmt.Errorf("%q: zoned addresses cannot go in a certificate", s)
	}
	return a.Unmap().String(), nil
}

// ServerURL is the API server URL every kubeconfig uses.
func (c PKIConfig) ServerURL() string {
	return "https://" + net.JoinHostPort(c.APIServer, fmt.Sprint(pkiAPIServerPort))
}

// layout is where every file of c's PKI lives.
func (c PKIConfig) layout() *PKI {
	f := func(name string) string { return filepath.Join(c.Dir, name) }
	p := &PKI{
		Dir:    c.Dir,
		CACert: f("ca.crt"), CAKey: f("ca.key"),
		APIServerCert: f("apiserver.crt"), APIServerKey: f("apiserver.key"),
		KubeletClientCert: f("apiserver-kubelet-client.crt"), KubeletClientKey: f("apiserver-kubelet-client.key"),
		SAPub: f("sa.pub"), SAKey: f("sa.key"),
		Admin:             f("admin.kubeconfig"),
		ControllerManager: f("kube-controller-manager.kubeconfig"),
		Scheduler:         f("kube-scheduler.kubeconfig"),
		Proxy:             f("kube-proxy.kubeconfig"),
		Kubelets:          map[string]KubeletPKI{},
	}
	for _, n := range c.Nodes {
		p.Kubelets[n.Name] = KubeletPKI{
			Kubeconfig:  f("kubelet-" + n.Name + ".kubeconfig"),
			ServingCert: f("kubelet-" + n.Name + "-serving.crt"),
			ServingKey:  f("kubelet-" + n.Name + "-serving.key"),
		}
	}
	return p
}

// pkiLeaf is one certificate to issue.
type pkiLeaf struct {
	cn, org   string
	usage     x509.ExtKeyUsage
	dns       []string
	ips       []string
	cert, key string
	// kubeconfig, for client certs used by a component.
	kubeconfig string
}

// leaves is every certificate signed by the CA. The client cert of a
// kubeconfig is <base>.crt and <base>.key next to it.
func (p *PKI) leaves(c PKIConfig) []pkiLeaf {
	client := func(cn, org, kubeconfig, base string) pkiLeaf {
		base = filepath.Join(p.Dir, base)
		return pkiLeaf{cn: cn, org: org, usage: x509.ExtKeyUsageClientAuth,
			cert: base + ".crt", key: base + ".key", kubeconfig: kubeconfig}
	}
	ls := []pkiLeaf{
		{cn: "kube-apiserver", usage: x509.ExtKeyUsageServerAuth,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"},
			ips:  uniq(c.APIServer, "127.0.0.1", pkiServiceIP),
			cert: p.APIServerCert, key: p.APIServerKey},
		{cn: "kube-apiserver-kubelet-client", org: "system:masters", usage: x509.ExtKeyUsageClientAuth,
			cert: p.KubeletClientCert, key: p.KubeletClientKey},
		client("sandlot-admin", "system:masters", p.Admin, "admin"),
		client("system:kube-controller-manager", "", p.ControllerManager, "kube-controller-manager"),
		client("system:kube-scheduler", "", p.Scheduler, "kube-scheduler"),
		client("system:kube-proxy", "", p.Proxy, "kube-proxy"),
	}
	for _, n := range c.Nodes {
		k := p.Kubelets[n.Name]
		// kubelet-<name>-client.* and kubelet-<name>-serving.* cannot
		// collide for two node names. The serving cert has the identity
		// the kubelet-serving signer would give it.
		ls = append(ls, client("system:node:"+n.Name, "system:nodes", k.Kubeconfig, "kubelet-"+n.Name+"-client"),
			pkiLeaf{cn: "system:node:" + n.Name, org: "system:nodes", usage: x509.ExtKeyUsageServerAuth,
				dns: []string{n.Name}, ips: uniq(n.IP, "127.0.0.1"), cert: k.ServingCert, key: k.ServingKey})
	}
	return ls
}

func uniq(ss ...string) []string {
	var out []string
	for _, s := range ss {
		dup := false
		for _, o := range out {
			dup = dup || o == s
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

// pkiRecord is pki.json: the config a PKI was made for.
type pkiRecord struct {
	Layout int
	PKIConfig
}

func readPKIConfig(dir string) (PKIConfig, error) {
	b, err := os.ReadFile(filepath.Join(dir, pkiConfigFile))
	if err != nil {
		return PKIConfig{}, fmt.Errorf("read PKI config: %w", err)
	}
	var r pkiRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return PKIConfig{}, fmt.Errorf("parse %s: %w", filepath.Join(dir, pkiConfigFile), err)
	}
	if r.Layout != pkiLayout {
		return PKIConfig{}, fmt.Errorf("%s: layout %d, want %d", filepath.Join(dir, pkiConfigFile), r.Layout, pkiLayout)
	}
	return r.PKIConfig, nil
}

// check verifies that p is a complete PKI for c: same config, every file
// present, every key matching its cert, every cert chaining to the CA and
// valid for at least margin more.
func (p *PKI) check(c PKIConfig, margin time.Duration) error {
	stored, err := readPKIConfig(p.Dir)
	if err != nil {
		return err
	}
	want, _ := json.Marshal(c)
	got, _ := json.Marshal(stored)
	if !bytes.Equal(want, got) {
		return fmt.Errorf("%s was made for %s, not %s", p.Dir, got, want)
	}
	roots := x509.NewCertPool()
	ca, err := loadPair(p.CACert, p.CAKey)
	if err != nil {
		return err
	}
	roots.AddCert(ca)
	at := time.Now().Add(margin)
	for _, l := range p.leaves(c) {
		cert, err := loadPair(l.cert, l.key)
		if err != nil {
			return err
		}
		opts := x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{l.usage}}
		if _, err := cert.Verify(opts); err != nil {
			return fmt.Errorf("%s at %s: %w", l.cert, at.Format(time.RFC3339), err)
		}
		if l.kubeconfig != "" {
			if _, err := os.Stat(l.kubeconfig); err != nil {
				return err
			}
		}
	}
	return checkSAKeys(p.SAPub, p.SAKey)
}

// loadPair parses a cert and checks that key belongs to it.
func loadPair(certPath, keyPath string) (*x509.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", certPath, keyPath, err)
	}
	if pair.Leaf != nil {
		return pair.Leaf, nil
	}
	return x509.ParseCertificate(pair.Certificate[0])
}

func checkSAKeys(pubPath, keyPath string) error {
	key, err := keyutil.PrivateKeyFromFile(keyPath)
	if err != nil {
		return fmt.Errorf("%s: %w", keyPath, err)
	}
	pubs, err := keyutil.PublicKeysFromFile(pubPath)
	if err != nil {
		return fmt.Errorf("%s: %w", pubPath, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok || len(pubs) != 1 {
		return fmt.Errorf("%s, %s: want one key pair", keyPath, pubPath)
	}
	if eq, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(pubs[0]) {
		return fmt.Errorf("%s does not match %s", pubPath, keyPath)
	}
	return nil
}

// generate writes a fresh PKI. pki.json goes first out and last in, so an
// interrupted run is never mistaken for a complete one.
func (p *PKI) generate(c PKIConfig) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	// MkdirAll keeps an existing directory's mode; the keys live here.
	if err := os.Chmod(p.Dir, 0o700); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(p.Dir, pkiConfigFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ca, caKey, err := p.writeCA()
	if err != nil {
		return err
	}
	for _, l := range p.leaves(c) {
		if err := writeLeaf(l, ca, caKey); err != nil {
			return fmt.Errorf("%s: %w", l.cn, err)
		}
		if l.kubeconfig != "" {
			if err := writeKubeconfig(l.kubeconfig, c.ServerURL(), p.CACert, l); err != nil {
				return err
			}
		}
	}
	if err := p.writeSAKeys(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(pkiRecord{Layout: pkiLayout, PKIConfig: c}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(p.Dir, pkiConfigFile), append(b, '\n'), 0o644)
}

func (p *PKI) writeCA() (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := certTemplate("sandlot-ca", "", caValidity)
	if err != nil {
		return nil, nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA: %w", err)
	}
	if err := writeCertAndKey(p.CACert, p.CAKey, der, key); err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

func writeLeaf(l pkiLeaf, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl, err := certTemplate(l.cn, l.org, leafValidity)
	if err != nil {
		return err
	}
	// ECDSA keys only sign: no KeyEncipherment.
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{l.usage}
	tmpl.BasicConstraintsValid = true
	tmpl.DNSNames = l.dns
	for _, s := range l.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(s))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("create certificate: %w", err)
	}
	return writeCertAndKey(l.cert, l.key, der, key)
}

func certTemplate(cn, org string, validity time.Duration) (*x509.Certificate, error) {
	// RFC 5280: positive, at most 20 octets.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	subject := pkix.Name{CommonName: cn}
	if org != "" {
		subject.Organization = []string{org}
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial.Add(serial, big.NewInt(1)),
		Subject:      subject,
		NotBefore:    now.Add(-pkiBackdate),
		NotAfter:     now.Add(validity),
	}, nil
}

func writeCertAndKey(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeSAKeys writes the key pair that signs and verifies service-account
// tokens. RSA: every kube-apiserver version accepts it for both flags.
func (p *PKI) writeSAKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := writeFileAtomic(p.SAKey, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(p.SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// writeKubeconfig writes a kubeconfig that references the cert files by
// absolute path, so that regenerating them needs no kubeconfig edit.
func writeKubeconfig(path, server, caCert string, l pkiLeaf) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[pkiClusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caCert}
	cfg.AuthInfos[pkiClusterName] = &clientcmdapi.AuthInfo{ClientCertificate: l.cert, ClientKey: l.key}
	cfg.Contexts[pkiClusterName] = &clientcmdapi.Context{Cluster: pkiClusterName, AuthInfo: pkiClusterName}
	cfg.CurrentContext = pkiClusterName
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writeFileAtomic(path, b, 0o600)
}

// writeFileAtomic replaces path in one rename, so a process starting
// concurrently never reads half a file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// IssueServingCert writes a server certificate for dnsNames (wildcards
// allowed), signed by the cluster's CA, into dir as <name>.crt and
// <name>.key; clients trust it through CACert.
func (p *PKI) IssueServingCert(dir, name string, dnsNames ...string) (certPath, keyPath string, err error) {
	pair, err := tls.LoadX509KeyPair(p.CACert, p.CAKey)
	if err != nil {
		return "", "", fmt.Errorf("load the cluster CA: %w", err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "", "", err
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return "", "", fmt.Errorf("the cluster CA's key cannot sign")
	}
	l := pkiLeaf{cn: dnsNames[0], usage: x509.ExtKeyUsageServerAuth, dns: dnsNames,
		cert: filepath.Join(dir, name+".crt"), key: filepath.Join(dir, name+".key")}
	return l.cert, l.key, writeLeaf(l, ca, signer)
}
