package pkicmd

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pkiplan"
)

// issue writes c's pair under dir (kept when it matches, unless renew)
// and reports it: what it is, its subject, usages, hosts and signer, the
// files, and each command line that takes them.
func issue(cas pkiplan.CAs, dir string, c pkiplan.Cert, renew bool, out io.Writer) (pki.KeyPair, error) {
	before, _ := os.ReadFile(c.CertFile(dir))
	var (
		kp  pki.KeyPair
		err error
	)
	if renew {
		kp, err = cas.Renew(dir, c)
	} else {
		kp, err = cas.Issue(dir, c)
	}
	if err != nil {
		return pki.KeyPair{}, err
	}
	tc, err := kp.TLSCertificate()
	if err != nil {
		return pki.KeyPair{}, err
	}
	verb := "issued"
	if bytes.Equal(before, kp.CertPEM) {
		verb = "kept (matches the plan)"
	}
	fmt.Fprintf(out, "%s: %s\n", c.Name, c.About)
	row := func(k, v string) { fmt.Fprintf(out, "  %-12s %s\n", k, v) }
	row("subject", tc.Leaf.Subject.String())
	row("usages", usages(c.Spec))
	if c.Spec.Server {
		row("hosts", pkiplan.Hosts{DNSNames: c.Spec.DNSNames, IPs: c.Spec.IPAddresses}.String())
	}
	row("signed by", fmt.Sprintf("the %s, valid until %s", caName(c.Signer), tc.Leaf.NotAfter.Format("2006-01-02")))
	row("files", fmt.Sprintf("%s, %s: %s", kp.CertFile, kp.KeyFile, verb))
	for _, u := range c.Uses {
		var line []string
		for _, f := range u.Flags {
			line = append(line, f.Name+" "+c.Path(dir, f.File))
		}
		row(u.Command, strings.Join(line, " "))
	}
	return kp, nil
}

func usages(s pki.CertSpec) string {
	switch {
	case s.Server && s.Client:
		return "server and client authentication"
	case s.Server:
		return "server authentication"
	default:
		return "client authentication"
	}
}
