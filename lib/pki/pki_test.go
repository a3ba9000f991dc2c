package pki

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := LoadOrCreateCA(dir, "meridian-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "meridian-ca" {
		t.Fatalf("bad CA certificate: %+v", ca.Cert.Subject)
	}
	if d := time.Until(ca.Cert.NotAfter); d < CAValidity-2*time.Hour {
		t.Fatalf("CA valid for %s only", d)
	}
	fi, err := os.Stat(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key mode %v, want 0600", fi.Mode().Perm())
	}
	again, err := LoadOrCreateCA(dir, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cert.Equal(ca.Cert) {
		t.Fatal("existing CA not reused")
	}
	if !bytes.Equal(again.CertPEM(), ca.CertPEM()) {
		t.Fatal("CertPEM differs after reload")
	}

	if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateCA(dir, "meridian-ca"); err == nil {
		t.Fatal("a lone ca.crt was silently replaced")
	}
}

func TestWriteCert(t *testing.T) {
	ca, err := NewCA("meridian-ca")
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(t.TempDir(), "ca-bundle.crt")
	if err := ca.WriteCert(name); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, ca.CertPEM()) {
		t.Fatalf("wrote %q, want the CA certificate alone", data)
	}
	if _, err := parseKeyPEM(data); err == nil {
		t.Fatal("the CA key was written")
	}
}

func TestIssueAndVerify(t *testing.T) {
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(CertSpec{CommonName: "store", DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	if kp.CertFile != "" || kp.KeyFile != "" {
		t.Fatal("in-memory pair names files")
	}
	c, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leaf.Verify(x509VerifyOptions(ca, "localhost")); err != nil {
		t.Fatalf("issued certificate does not verify: %v", err)
	}
	if d := time.Until(c.Leaf.NotAfter); d < DefaultValidity-time.Hour || d > DefaultValidity+time.Hour {
		t.Fatalf("default validity is %s", d)
	}

	if _, err := ca.Issue(CertSpec{}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("empty spec: err = %v, want ErrInvalidSpec", err)
	}
}

func TestLoadOrIssue(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	spec := CertSpec{CommonName: "gateway", Organizations: []string{"meridian:gateways"}, DNSNames: []string{"a", "b"}, Client: true}
	first, err := ca.LoadOrIssue(dir, "gateway", spec)
	if err != nil {
		t.Fatal(err)
	}
	if first.CertFile != filepath.Join(dir, "gateway.crt") || first.KeyFile != filepath.Join(dir, "gateway.key") {
		t.Fatalf("files %q %q", first.CertFile, first.KeyFile)
	}
	if fi, err := os.Stat(first.KeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}

	// Same spec (SAN order differs): reused.
	reordered := spec
	reordered.DNSNames = []string{"b", "a"}
	again, err := ca.LoadOrIssue(dir, "gateway", reordered)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.CertPEM, first.CertPEM) || !bytes.Equal(again.KeyPEM, first.KeyPEM) {
		t.Fatal("matching pair was reissued")
	}

	// Changed SANs: reissued.
	changed := spec
	changed.DNSNames = []string{"a", "b", "c"}
	re, err := ca.LoadOrIssue(dir, "gateway", changed)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(re.CertPEM, first.CertPEM) {
		t.Fatal("pair with other SANs was reused")
	}
	c, _ := re.TLSCertificate()
	if len(c.Leaf.DNSNames) != 3 {
		t.Fatalf("reissued SANs %v", c.Leaf.DNSNames)
	}

	// Changed organization: reissued.
	org := changed
	org.Organizations = []string{"other"}
	if re2, err := ca.LoadOrIssue(dir, "gateway", org); err != nil || bytes.Equal(re2.CertPEM, re.CertPEM) {
		t.Fatalf("pair with other O was reused (err %v)", err)
	}

	// Another CA: reissued and signed by it.
	other, err := NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	fromOther, err := other.LoadOrIssue(dir, "gateway", org)
	if err != nil {
		t.Fatal(err)
	}
	oc, _ := fromOther.TLSCertificate()
	if err := oc.Leaf.CheckSignatureFrom(other.Cert); err != nil {
		t.Fatalf("not reissued by the new CA: %v", err)
	}

	// A key that does not match: reissued.
	kp2, _ := other.Issue(org)
	if err := os.WriteFile(fromOther.KeyFile, kp2.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	fixed, err := other.LoadOrIssue(dir, "gateway", org)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fixed.TLSCertificate(); err != nil {
		t.Fatalf("mismatched pair not repaired: %v", err)
	}
}

func TestReusableExpiry(t *testing.T) {
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	spec := CertSpec{CommonName: "x", Server: true}
	kp, err := ca.Issue(spec)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if !ca.reusable(kp.CertPEM, kp.KeyPEM, spec, now) {
		t.Fatal("fresh certificate not reusable")
	}
	if ca.reusable(kp.CertPEM, kp.KeyPEM, spec, now.Add(DefaultValidity-RenewBefore+time.Hour)) {
		t.Fatal("certificate expiring within RenewBefore reused")
	}
	short := CertSpec{CommonName: "x", Server: true, Validity: time.Hour}
	kp, _ = ca.Issue(short)
	if !ca.reusable(kp.CertPEM, kp.KeyPEM, short, now) {
		t.Fatal("short-lived certificate reissued at once")
	}
}

func TestLoadTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.LoadOrIssue(dir, "server", CertSpec{CommonName: "server", DNSNames: []string{"localhost"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.LoadOrIssue(dir, "client", CertSpec{CommonName: "client", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	serverConf, err := LoadServerTLS(srv.CertFile, srv.KeyFile, caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	if serverConf.ClientAuth != tls.RequireAndVerifyClientCert || serverConf.MinVersion != tls.VersionTLS12 {
		t.Fatalf("server config: auth %v min %x", serverConf.ClientAuth, serverConf.MinVersion)
	}
	if plain, err := LoadServerTLS(srv.CertFile, srv.KeyFile, "", nil); err != nil || plain.ClientAuth != tls.NoClientCert {
		t.Fatalf("no client CA: %v", err)
	}
	clientConf, err := LoadClientTLS(cli.CertFile, cli.KeyFile, caFile, "localhost", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadClientTLS(cli.CertFile, "", caFile, "localhost", nil); err == nil {
		t.Fatal("certificate without key accepted")
	}

	// Handshake over loopback: mutual authentication succeeds.
	lis, err := tls.Listen("tcp", "127.0.0.1:0", serverConf)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			errc <- err
			return
		}
		if n := len(tc.ConnectionState().VerifiedChains); n == 0 {
			errc <- errors.New("client certificate not verified")
			return
		}
		errc <- nil
	}()
	c, err := tls.Dial("tcp", lis.Addr().String(), clientConf)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
