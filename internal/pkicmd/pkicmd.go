// Package pkicmd is `meridian pki`: it creates the two certificate
// authorities of a deployment, issues the certificates lib/pkiplan plans
// for it, and writes kubeconfigs, into one directory with the all-in-one's
// layout (ca/ for the authorities, pki/ for what the services read). For
// each certificate it prints its subject, usages and hosts, the files it
// wrote and the flags that take them.
package pkicmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/meridian-cp/meridian/internal/kubeconfig"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pkiplan"
)

// DefaultDir is --dir's default: the all-in-one's default data directory,
// whose CAs `meridian pki` then shares.
const DefaultDir = ".meridian"

// ErrUsage reports a command line that names no subcommand or a wrong
// one; the usage has been printed.
var ErrUsage = errors.New("pki: bad usage")

const usage = `usage: meridian pki <command> [flags]

Creates the CAs and certificates of a meridian deployment, in --dir:
ca/api and ca/internal hold the two CAs (certificate and key), pki/ their
certificates and every certificate with its key. Services read pki/ only.

commands:
  init        create the API CA and the internal CA (kept when present)
  issue       issue one certificate (--service, --name, --hosts)
  all         create the CAs and every certificate a deployment on --hosts needs
  kubeconfig  issue an API user's client certificate and write a kubeconfig
  sa-key      create the service account token signing key (kept when present)
  rotate-sa-key  replace the service account token signing key, keeping the old public keys

Run "meridian pki <command> --help" for a command's flags.
See docs/certificates.md.
`

// Run runs `meridian pki` with args (after "pki"). Reports go to stdout,
// usage and help to stderr. --help returns nil.
func Run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return ErrUsage
		}
		return nil
	}
	cmds := map[string]func([]string, io.Writer, io.Writer) error{
		"init": runInit, "issue": runIssue, "all": runAll, "kubeconfig": runKubeconfig,
		"sa-key": runSAKey, "rotate-sa-key": runRotateSAKey,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "meridian pki: unknown command %q\n\n%s", args[0], usage)
		return ErrUsage
	}
	err := cmd(args[1:], stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// newFlags returns the flag set of a subcommand, with --dir.
func newFlags(name, summary string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("meridian pki "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: meridian pki %s [flags]\n\n%s\n\nflags:\n", name, summary)
		fs.PrintDefaults()
	}
	dir := fs.String("dir", DefaultDir, "directory of the deployment's CAs (ca/) and certificates (pki/)")
	return fs, dir
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

func runInit(args []string, stdout, stderr io.Writer) error {
	fs, dir := newFlags("init", "Creates the API CA and the internal CA in --dir/ca, and copies their certificates to --dir/pki. CAs already there are kept.", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	_, err := createCAs(*dir, stdout)
	return err
}

// createCAs loads or creates the CAs and reports each.
func createCAs(dir string, out io.Writer) (pkiplan.CAs, error) {
	existed := map[pkiplan.Authority]bool{}
	for _, a := range pkiplan.Authorities() {
		_, err := os.Stat(filepath.Join(a.Dir(dir), "ca.crt"))
		existed[a] = err == nil
	}
	cas, err := pkiplan.LoadOrCreateCAs(dir)
	if err != nil {
		return pkiplan.CAs{}, err
	}
	for _, a := range pkiplan.Authorities() {
		verb := "created"
		if existed[a] {
			verb = "kept"
		}
		ca := cas.Of(a)
		fmt.Fprintf(out, "%s (CN=%s, valid until %s): %s %s\n", caName(a), ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format("2006-01-02"),
			verb, filepath.Join(a.Dir(dir), "ca.{crt,key}"))
		fmt.Fprintf(out, "  %-12s %s, taken by:\n", "copied to", a.CertFile(dir))
		for _, u := range pkiplan.CAUses(a) {
			fmt.Fprintf(out, "  %-12s %s\n", u.Command, u.Flags[0].Name)
		}
	}
	fmt.Fprintf(out, "keep %s private: its keys sign certificates every service trusts\n", filepath.Join(dir, pkiplan.CADir))
	return cas, nil
}

// loadCAs loads the CAs `init` created.
func loadCAs(dir string) (pkiplan.CAs, error) {
	cas, err := pkiplan.LoadCAs(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return pkiplan.CAs{}, fmt.Errorf("no CAs in %s (run `meridian pki init --dir %s` first): %w", filepath.Join(dir, pkiplan.CADir), dir, err)
	}
	return cas, err
}

func runIssue(args []string, stdout, stderr io.Writer) error {
	fs, dir := newFlags("issue", "Issues one certificate with the CA of --dir that signs its kind, into --dir/pki/<name>.crt and .key.\n"+
		"A pair already there that matches (subject, usages, hosts, signer, not near expiry) is kept unless --renew.", stderr)
	service := fs.String("service", "", "kind of certificate: "+pkiplan.KindNames()+" (required)")
	name := fs.String("name", "", "file name and CN suffix (CN=meridian-<name>), e.g. store-0; default the kind")
	hosts := fs.String("hosts", "", "comma-separated DNS names and IP addresses the service is dialed at (its SANs); required for serving certificates, none for apigateway-client and operator")
	renew := fs.Bool("renew", false, "issue a new pair even when the one there matches (rotation: running services pick it up within 5s)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *service == "" {
		return errors.New("issue: --service is required (one of " + pkiplan.KindNames() + ")")
	}
	h, err := pkiplan.ParseHosts(*hosts)
	if err != nil {
		return err
	}
	c, err := pkiplan.ServiceCert(pkiplan.Kind(*service), *name, h)
	if err != nil {
		return err
	}
	// Only the signer is needed: a pod issuing its own certificate from
	// the internal CA is never given the API CA's key.
	cas, err := pkiplan.LoadSigner(*dir, c.Signer)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no %s CA in %s (run `meridian pki init --dir %s` first): %w", c.Signer, filepath.Join(*dir, pkiplan.CADir), *dir, err)
	}
	if err != nil {
		return err
	}
	_, err = issue(cas, *dir, c, *renew, stdout)
	return err
}

func runAll(args []string, stdout, stderr io.Writer) error {
	fs, dir := newFlags("all", "Creates the CAs (kept when present) and every certificate a deployment on --hosts needs: one per service,\n"+
		"shared by its replicas, the gateway's client certificate, an operator's and the admin's; with --server, the admin kubeconfig.", stderr)
	hosts := fs.String("hosts", "", "comma-separated DNS names and IP addresses the internal services are dialed at (required)")
	apiHosts := fs.String("api-hosts", "", "comma-separated names and addresses clients reach the API at; default --hosts")
	server := fs.String("server", "", "the API's URL (https://host:6443): also write --dir/admin.kubeconfig")
	renew := fs.Bool("renew", false, "issue every certificate anew, even those that match")
	if err := parse(fs, args); err != nil {
		return err
	}
	h, err := pkiplan.ParseHosts(*hosts)
	if err != nil {
		return err
	}
	if h.Empty() {
		return errors.New("all: --hosts is required")
	}
	ah := h
	if *apiHosts != "" {
		if ah, err = pkiplan.ParseHosts(*apiHosts); err != nil {
			return err
		}
	}
	plan, err := pkiplan.Deployment(h, ah)
	if err != nil {
		return err
	}
	cas, err := createCAs(*dir, stdout)
	if err != nil {
		return err
	}
	var admin pki.KeyPair
	for _, c := range plan {
		fmt.Fprintln(stdout)
		kp, err := issue(cas, *dir, c, *renew, stdout)
		if err != nil {
			return err
		}
		if c.Kind == pkiplan.User {
			admin = kp
		}
	}
	fmt.Fprintln(stdout)
	if err := ensureSAKey(*dir, stdout); err != nil {
		return err
	}
	if *server == "" {
		return nil
	}
	fmt.Fprintln(stdout)
	return writeKubeconfig(filepath.Join(*dir, "admin.kubeconfig"), *server, cas, "admin", []string{"system:masters"}, admin, stdout)
}

func runKubeconfig(args []string, stdout, stderr io.Writer) error {
	fs, dir := newFlags("kubeconfig", "Issues (or keeps) an API user's client certificate with the API CA of --dir, into --dir/pki/<name>.crt,\n"+
		"and writes a kubeconfig embedding it and the API CA.", stderr)
	server := fs.String("server", "", "the API's URL, e.g. https://10.0.1.1:6443 (required)")
	user := fs.String("user", "admin", "user name (the certificate's CN)")
	var groups []string
	fs.Func("group", "group (the certificate's O), repeatable or comma-separated; default system:masters for the user admin, none for others", func(s string) error {
		for _, g := range strings.Split(s, ",") {
			if g = strings.TrimSpace(g); g != "" {
				groups = append(groups, g)
			}
		}
		return nil
	})
	name := fs.String("name", "", "file name of the certificate in --dir/pki; default the user name")
	out := fs.String("out", "", "kubeconfig path; default --dir/<name>.kubeconfig")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *server == "" || !strings.HasPrefix(*server, "https://") {
		return errors.New("kubeconfig: --server https://host:port is required")
	}
	if groups == nil && *user == "admin" {
		groups = []string{"system:masters"}
	}
	c, err := pkiplan.UserCert(*user, groups, *name)
	if err != nil {
		return err
	}
	cas, err := loadCAs(*dir)
	if err != nil {
		return err
	}
	kp, err := issue(cas, *dir, c, false, stdout)
	if err != nil {
		return err
	}
	path := *out
	if path == "" {
		path = filepath.Join(*dir, c.Name+".kubeconfig")
	}
	fmt.Fprintln(stdout)
	return writeKubeconfig(path, *server, cas, *user, groups, kp, stdout)
}

func writeKubeconfig(path, server string, cas pkiplan.CAs, user string, groups []string, kp pki.KeyPair, out io.Writer) error {
	if err := kubeconfig.Write(path, server, cas.API.CertPEM(), user, kp); err != nil {
		return err
	}
	as := user
	if len(groups) > 0 {
		as += " (groups " + strings.Join(groups, ", ") + ")"
	}
	fmt.Fprintf(out, "kubeconfig %s: %s as %s, API verified with the API CA\n  try: kubectl --kubeconfig %s get namespaces\n", path, server, as, path)
	return nil
}

// caName names an authority in reports.
func caName(a pkiplan.Authority) string {
	if a == pkiplan.APIAuthority {
		return "API CA"
	}
	return "internal CA"
}
