package pkiplan_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/meridian-cp/meridian/lib/pkiplan"
)

// TestLayout: the CAs are created under ca/ with their keys, their
// certificates alone copied to pki/; loading finds them again; Issue
// reuses a pair that still matches and Renew replaces it.
func TestLayout(t *testing.T) {
	root := t.TempDir()
	if _, err := pkiplan.LoadCAs(root); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadCAs of an empty directory: %v, want fs.ErrNotExist", err)
	}
	cas, err := pkiplan.LoadOrCreateCAs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range pkiplan.Authorities() {
		if fi, err := os.Stat(filepath.Join(a.Dir(root), "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s CA key: %v %v", a, fi, err)
		}
		copied, err := os.ReadFile(a.CertFile(root))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(copied, cas.Of(a).CertPEM()) {
			t.Fatalf("%s holds something else than the %s CA's certificate", a.CertFile(root), a)
		}
		if cas.Of(a).Cert.Subject.CommonName != a.CommonName() {
			t.Fatalf("%s CA subject %s", a, cas.Of(a).Cert.Subject)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, pkiplan.CADir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("CA directory: %v %v", fi, err)
	}
	again, err := pkiplan.LoadCAs(root)
	if err != nil {
		t.Fatal(err)
	}
	if !again.API.Cert.Equal(cas.API.Cert) || !again.Internal.Cert.Equal(cas.Internal.Cert) {
		t.Fatal("LoadCAs found other CAs")
	}

	c, err := pkiplan.ServiceCert(pkiplan.Admission, "", pkiplan.Loopback())
	if err != nil {
		t.Fatal(err)
	}
	first, err := cas.Issue(root, c)
	if err != nil {
		t.Fatal(err)
	}
	if first.CertFile != c.CertFile(root) || first.KeyFile != c.KeyFile(root) {
		t.Fatalf("written to %s %s", first.CertFile, first.KeyFile)
	}
	reused, err := cas.Issue(root, c)
	if err != nil || !bytes.Equal(reused.CertPEM, first.CertPEM) {
		t.Fatalf("Issue did not reuse the pair: %v", err)
	}
	renewed, err := cas.Renew(root, c)
	if err != nil || bytes.Equal(renewed.CertPEM, first.CertPEM) {
		t.Fatalf("Renew kept the pair: %v", err)
	}
	onDisk, err := os.ReadFile(c.CertFile(root))
	if err != nil || !bytes.Equal(onDisk, renewed.CertPEM) {
		t.Fatalf("the renewed pair is not on disk: %v", err)
	}
}
