package inet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandlot-dev/sandlot/shim/podnet"
)

// The secure host answers HTTP on 80 and HTTPS on 443 (a certificate
// from this run's own CA, which CAFile holds for the node's egress proxy
// to trust) with what it received of the header rules' tests: the
// SHA-256 of the Authorization header ("auth=<hex>", "auth=none"), never
// the value, so a secret never travels back into the sandbox.
const (
	IPSecure   = "198.51.100.30"
	SecureName = "secure.test"
)

func init() { Zone[SecureName+"."] = IPSecure }

// AuthDigest is what the secure host answers for an Authorization value.
func AuthDigest(v string) string {
	if v == "" {
		return "auth=none"
	}
	sum := sha256.Sum256([]byte(v))
	return "auth=" + hex.EncodeToString(sum[:])
}

// CAFile is the PEM file of the CA the secure host's certificate is from.
func (x *Internet) CAFile() string {
	return filepath.Join(os.TempDir(), x.netns()+"-ca.pem")
}

// serveSecure starts the secure host in the netns.
func (x *Internet) serveSecure() error {
	cert, err := x.secureCert()
	if err != nil {
		return err
	}
	var plain, secure net.Listener
	err = podnet.Run(x.NsPath(), func() (err error) {
		if plain, err = x.listen(net.JoinHostPort(IPSecure, "80")); err != nil {
			return err
		}
		secure, err = x.listen(net.JoinHostPort(IPSecure, "443"))
		return err
	})
	if err != nil {
		return err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, AuthDigest(r.Header.Get("Authorization")))
	})
	// One server each: a server that also serves plain HTTP answers no
	// HTTP/2 over TLS (the connection closes after the handshake).
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: h}
	tlsSrv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: h,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go func() { _ = srv.Serve(plain) }()
	go func() { _ = tlsSrv.ServeTLS(secure, "", "") }()
	x.closers = append(x.closers, srv.Close, tlsSrv.Close, func() error { return os.Remove(x.CAFile()) })
	return nil
}

// secureCert makes this run's CA (written to CAFile) and the host's
// certificate from it.
func (x *Internet) secureCert() (tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandlot test internet CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(x.CAFile(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("write the test CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: SecureName},
		DNSNames: []string{SecureName}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
