package pkicmd_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/internal/pkicmd"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
)

// run runs `meridian pki args...` and returns its report.
func run(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := pkicmd.Run(args, &out, &errOut); err != nil {
		t.Fatalf("meridian pki %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

func loadPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	p, err := pki.LoadPool(file)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func loadLeaf(t *testing.T, dir, name string) *x509.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, "pki", name+".crt"), filepath.Join(dir, "pki", name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

// TestInitIssueAll runs init, issue and all into a directory and checks
// what they wrote with crypto/x509: each certificate chains to the CA
// that signs its kind, for its usage, for the hosts given, and not to the
// other CA; keys are private, the CA keys only under ca/; the report
// names every file and the flags that take it; a second run keeps every
// pair and --renew replaces one.
func TestInitIssueAll(t *testing.T) {
	dir := t.TempDir()
	out := run(t, "init", "--dir", dir)
	for _, want := range []string{"API CA", "internal CA", "created", filepath.Join(dir, "pki", "internal-ca.crt"), "--peer-ca-file", "--service-ca-file"} {
		if !strings.Contains(out, want) {
			t.Errorf("init report lacks %q:\n%s", want, out)
		}
	}
	if out := run(t, "init", "--dir", dir); !strings.Contains(out, "kept") || strings.Contains(out, "created") {
		t.Errorf("second init:\n%s", out)
	}

	out = run(t, "issue", "--dir", dir, "--service", "store", "--name", "store-0", "--hosts", "10.0.0.1,store-0.example")
	crt, key := filepath.Join(dir, "pki", "store-0.crt"), filepath.Join(dir, "pki", "store-0.key")
	if want := "store        --tls-cert-file " + crt + " --tls-key-file " + key; !strings.Contains(out, want) {
		t.Errorf("issue report lacks %q:\n%s", want, out)
	}
	internal, api := loadPool(t, filepath.Join(dir, "pki", "internal-ca.crt")), loadPool(t, filepath.Join(dir, "pki", "api-ca.crt"))
	store0 := loadLeaf(t, dir, "store-0")
	for _, host := range []string{"10.0.0.1", "store-0.example"} {
		if _, err := store0.Verify(x509.VerifyOptions{Roots: internal, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("store-0 for %s: %v", host, err)
		}
	}
	if store0.Subject.CommonName != "meridian-store-0" || !slices.Equal(store0.Subject.Organization, []string{identity.StorePeerOrganization}) {
		t.Errorf("store-0 subject %s", store0.Subject)
	}

	out = run(t, "all", "--dir", dir, "--hosts", "10.0.0.1,10.0.0.2,svc.example", "--api-hosts", "api.example", "--server", "https://api.example:6443")
	for name, want := range map[string]struct {
		roots, other *x509.CertPool
		usage        x509.ExtKeyUsage
		host         string
	}{
		"store":             {internal, api, x509.ExtKeyUsageServerAuth, "10.0.0.2"},
		"watchfanout":       {internal, api, x509.ExtKeyUsageServerAuth, "svc.example"},
		"admission":         {internal, api, x509.ExtKeyUsageServerAuth, "10.0.0.1"},
		"flowcontrol":       {internal, api, x509.ExtKeyUsageServerAuth, "10.0.0.1"},
		"apiserver":         {api, internal, x509.ExtKeyUsageServerAuth, "api.example"},
		"apigateway-client": {internal, api, x509.ExtKeyUsageClientAuth, ""},
		"operator":          {internal, api, x509.ExtKeyUsageClientAuth, ""},
		"admin":             {api, internal, x509.ExtKeyUsageClientAuth, ""},
	} {
		leaf := loadLeaf(t, dir, name)
		opts := x509.VerifyOptions{Roots: want.roots, DNSName: want.host, KeyUsages: []x509.ExtKeyUsage{want.usage}}
		if _, err := leaf.Verify(opts); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		opts.Roots = want.other
		if _, err := leaf.Verify(opts); err == nil {
			t.Errorf("%s verifies against the other CA", name)
		}
		if fi, err := os.Stat(filepath.Join(dir, "pki", name+".key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: %v %v", name, fi, err)
		}
		if !strings.Contains(out, filepath.Join(dir, "pki", name+".crt")) {
			t.Errorf("the report does not name %s.crt", name)
		}
	}
	for _, want := range []string{"--store-cert-file", "--service-cert-file", "--cacert", "kubeconfig " + filepath.Join(dir, "admin.kubeconfig")} {
		if !strings.Contains(out, want) {
			t.Errorf("all report lacks %q", want)
		}
	}
	caKeys, err := filepath.Glob(filepath.Join(dir, "pki", "*ca.key"))
	if err != nil || len(caKeys) > 0 {
		t.Errorf("CA keys in pki/: %v %v", caKeys, err)
	}

	before, err := os.ReadFile(filepath.Join(dir, "pki", "store.crt"))
	if err != nil {
		t.Fatal(err)
	}
	out = run(t, "all", "--dir", dir, "--hosts", "10.0.0.1,10.0.0.2,svc.example", "--api-hosts", "api.example")
	if n := strings.Count(out, ": issued"); n != 0 {
		t.Errorf("a second run issued %d certificates:\n%s", n, out)
	}
	run(t, "issue", "--dir", dir, "--service", "store", "--hosts", "10.0.0.1,10.0.0.2,svc.example", "--renew")
	if after, err := os.ReadFile(filepath.Join(dir, "pki", "store.crt")); err != nil || bytes.Equal(after, before) {
		t.Errorf("--renew kept the pair: %v", err)
	}
}

// TestUsageErrors: each mistake fails with a message naming it, and
// writes nothing.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"issue", "--dir", dir, "--service", "store", "--hosts", "x"}, "pki init"},
		{[]string{"issue", "--dir", dir}, "--service is required"},
		{[]string{"issue", "--dir", dir, "--service", "etcd", "--hosts", "x"}, "unknown kind"},
		{[]string{"issue", "--dir", dir, "--service", "store"}, "needs hosts"},
		{[]string{"issue", "--dir", dir, "--service", "operator", "--hosts", "x"}, "takes no hosts"},
		{[]string{"issue", "--dir", dir, "--service", "store", "--hosts", "Bad_Host"}, "neither an IP address nor a DNS name"},
		{[]string{"all", "--dir", dir}, "--hosts is required"},
		{[]string{"kubeconfig", "--dir", dir}, "--server"},
		{[]string{"kubeconfig", "--dir", dir, "--server", "https://h:6443", "--user", "system:serviceaccount:a:b"}, "another name"},
		{[]string{"init", "--dir", dir, "extra"}, "unexpected arguments"},
	} {
		err := pkicmd.Run(tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want it to say %q", tc.args, err, tc.want)
		}
	}
	if err := pkicmd.Run([]string{"frobnicate"}, io.Discard, io.Discard); !errors.Is(err, pkicmd.ErrUsage) {
		t.Errorf("unknown command: %v", err)
	}
	var help bytes.Buffer
	if err := pkicmd.Run([]string{"kubeconfig", "--help"}, io.Discard, &help); err != nil || !strings.Contains(help.String(), "--group") && !strings.Contains(help.String(), "-group") {
		t.Errorf("kubeconfig --help: %v\n%s", err, help.String())
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		t.Errorf("failed commands wrote %v (%v)", entries, err)
	}
}

// TestKubeconfigAgainstAllInOne: an all-in-one started on a directory
// `meridian pki all` filled for loopback keeps every certificate it finds
// (the same plan issues both), and a kubeconfig `meridian pki kubeconfig`
// writes for it lists namespaces; one made with other CAs is refused.
func TestKubeconfigAgainstAllInOne(t *testing.T) {
	dir := t.TempDir()
	run(t, "all", "--dir", dir, "--hosts", "localhost,127.0.0.1,::1")
	crts, err := filepath.Glob(filepath.Join(dir, "pki", "*.crt"))
	if err != nil || len(crts) != 10 {
		t.Fatalf("pki/*.crt: %v %v", crts, err)
	}
	before := map[string][]byte{}
	for _, f := range crts {
		if before[f], err = os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}

	cp, err := allinone.Start(t.Context(), allinone.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Close() })
	for f, data := range before {
		if now, err := os.ReadFile(f); err != nil || !bytes.Equal(now, data) {
			t.Errorf("the all-in-one replaced %s (%v)", f, err)
		}
	}

	server := "https://" + cp.Addr.String()
	list := func(kubeconfig string) error {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 10 * time.Second
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		return err
	}
	run(t, "kubeconfig", "--dir", dir, "--server", server, "--user", "alice", "--group", "system:masters")
	if err := list(filepath.Join(dir, "alice.kubeconfig")); err != nil {
		t.Fatalf("alice's kubeconfig: %v", err)
	}
	stranger := t.TempDir()
	run(t, "init", "--dir", stranger)
	run(t, "kubeconfig", "--dir", stranger, "--server", server)
	if err := list(filepath.Join(stranger, "admin.kubeconfig")); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a kubeconfig of other CAs: %v, want a certificate error", err)
	}
}

// TestIssueWithTheSignerOnly: `pki issue` needs only the CA that signs
// the kind (the Helm chart's init containers hold the internal CA
// alone): an internal certificate is issued with ca/api absent, with the
// organization the services authorize by; an API certificate then fails,
// naming the missing CA.
func TestIssueWithTheSignerOnly(t *testing.T) {
	dir := t.TempDir()
	run(t, "init", "--dir", dir)
	if err := os.RemoveAll(filepath.Join(dir, "ca", "api")); err != nil {
		t.Fatal(err)
	}
	run(t, "issue", "--dir", dir, "--service", "store", "--hosts", "store-0.peers.ns.svc,10.1.2.3")
	leaf := loadLeaf(t, dir, "store")
	if got := leaf.Subject.Organization; len(got) != 1 || got[0] != "meridian:store-peers" {
		t.Errorf("store certificate's organization %v, want [meridian:store-peers]", got)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: loadPool(t, filepath.Join(dir, "pki", "internal-ca.crt")),
		DNSName: "store-0.peers.ns.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("store certificate does not verify with the internal CA: %v", err)
	}
	var errOut bytes.Buffer
	err := pkicmd.Run([]string{"issue", "--dir", dir, "--service", "apiserver", "--hosts", "api.example"}, io.Discard, &errOut)
	if err == nil || !strings.Contains(err.Error(), "no api CA in "+filepath.Join(dir, "ca")) {
		t.Errorf("issuing an API certificate without the API CA: %v, want an error naming the missing api CA", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pki", "apiserver.crt")); !os.IsNotExist(err) {
		t.Errorf("apiserver.crt written despite the error (stat: %v)", err)
	}
}
