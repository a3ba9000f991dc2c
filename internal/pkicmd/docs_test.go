package pkicmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/pkiplan"
)

// TestDocsListEveryCertificate: docs/certificates.md names every
// certificate lib/pkiplan plans, its file, CN and organizations, and every
// flag that takes one of its files with that file, so the page cannot
// fall behind the plan.
func TestDocsListEveryCertificate(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "certificates.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	plan, err := pkiplan.Deployment(pkiplan.Loopback(), pkiplan.Loopback())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plan {
		want := []string{"`" + c.Name + ".crt", "CN=" + c.Spec.CommonName, "`" + string(c.Kind) + "`"}
		if c.Kind == pkiplan.User {
			want = want[:2]
		}
		for _, o := range c.Spec.Organizations {
			want = append(want, "O="+o)
		}
		for _, u := range c.Uses {
			for _, f := range u.Flags {
				want = append(want, f.Name+" "+filepath.Base(c.Path("", f.File)))
			}
		}
		for _, w := range want {
			if !strings.Contains(doc, w) {
				t.Errorf("docs/certificates.md does not say %q (certificate %s)", w, c.Name)
			}
		}
	}
	for _, a := range pkiplan.Authorities() {
		for _, w := range []string{a.CommonName(), filepath.Base(a.CertFile("")), filepath.Join("ca", string(a)) + "/ca.crt"} {
			if !strings.Contains(doc, w) {
				t.Errorf("docs/certificates.md does not say %q (the %s CA)", w, a)
			}
		}
	}
}
