package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// pki is a throw-away certificate authority and the API server's serving
// certificate for 127.0.0.1, written as PEM files under dir.
type pki struct {
	caPEM                []byte
	caFile               string
	certFile, keyFile    string
	saKeyFile, saPubFile string
}

// newPKI writes a CA and the API server's certificate, valid for the
// loopback addresses and ips.
func newPKI(dir string, ips ...netip.Addr) (*pki, error) {
	p := &pki{
		caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "apiserver.crt"), keyFile: filepath.Join(dir, "apiserver.key"),
		saKeyFile: filepath.Join(dir, "sa.key"), saPubFile: filepath.Join(dir, "sa.pub"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ghostwatch-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, netIPs(ips)...),
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, serving, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	files := map[string][]byte{
		p.caFile:   p.caPEM,
		p.certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}
	for file, k := range map[string]*ecdsa.PrivateKey{p.keyFile: key, p.saKeyFile: saKey} {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		files[file] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b})
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files[p.saPubFile] = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	for f, b := range files {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", f, err)
		}
	}
	return p, nil
}

func netIPs(ips []netip.Addr) []net.IP {
	out := make([]net.IP, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.AsSlice())
	}
	return out
}

// newToken is a random bearer token.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
