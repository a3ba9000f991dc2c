package pkiplan_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pkiplan"
)

// issued is a deployment's certificates issued in memory, by kind.
type issued struct {
	cas   pkiplan.CAs
	certs map[pkiplan.Kind]*x509.Certificate
}

func issueDeployment(t *testing.T, hosts, apiHosts pkiplan.Hosts) issued {
	t.Helper()
	var cas pkiplan.CAs
	var err error
	if cas.API, err = pki.NewCA(pkiplan.APIAuthority.CommonName()); err != nil {
		t.Fatal(err)
	}
	if cas.Internal, err = pki.NewCA(pkiplan.InternalAuthority.CommonName()); err != nil {
		t.Fatal(err)
	}
	plan, err := pkiplan.Deployment(hosts, apiHosts)
	if err != nil {
		t.Fatal(err)
	}
	out := issued{cas: cas, certs: map[pkiplan.Kind]*x509.Certificate{}}
	for _, c := range plan {
		kp, err := cas.Of(c.Signer).Issue(c.Spec)
		if err != nil {
			t.Fatal(err)
		}
		tc, err := kp.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		out.certs[c.Kind] = tc.Leaf
	}
	return out
}

// verify returns the chains that verify leaf against ca for usage, as a
// TLS handshake builds them, and for a server certificate host.
func verify(leaf *x509.Certificate, ca *pki.CA, usage x509.ExtKeyUsage, host string) ([][]*x509.Certificate, error) {
	return leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
}

// TestDeploymentServesItsHosts: every serving certificate verifies, for
// server authentication, against its own CA for each host it was planned
// for, and against the other CA not at all.
func TestDeploymentServesItsHosts(t *testing.T) {
	hosts, err := pkiplan.ParseHosts("10.0.0.1,store-0.example", "10.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	apiHosts, err := pkiplan.ParseHosts("api.example,10.0.1.1")
	if err != nil {
		t.Fatal(err)
	}
	d := issueDeployment(t, hosts, apiHosts)
	for kind, want := range map[pkiplan.Kind]struct {
		ca, other *pki.CA
		hosts     []string
	}{
		pkiplan.Store:       {d.cas.Internal, d.cas.API, []string{"10.0.0.1", "store-0.example", "10.0.0.2"}},
		pkiplan.WatchFanout: {d.cas.Internal, d.cas.API, []string{"10.0.0.1", "store-0.example", "10.0.0.2"}},
		pkiplan.Admission:   {d.cas.Internal, d.cas.API, []string{"10.0.0.1", "store-0.example", "10.0.0.2"}},
		pkiplan.FlowControl: {d.cas.Internal, d.cas.API, []string{"10.0.0.1", "store-0.example", "10.0.0.2"}},
		pkiplan.APIServer:   {d.cas.API, d.cas.Internal, []string{"api.example", "10.0.1.1"}},
	} {
		leaf := d.certs[kind]
		for _, h := range want.hosts {
			if _, err := verify(leaf, want.ca, x509.ExtKeyUsageServerAuth, h); err != nil {
				t.Errorf("%s for %s: %v", kind, h, err)
			}
		}
		if _, err := verify(leaf, want.ca, x509.ExtKeyUsageServerAuth, "elsewhere.example"); err == nil {
			t.Errorf("%s verifies for a host it was not planned for", kind)
		}
		if _, err := verify(leaf, want.other, x509.ExtKeyUsageServerAuth, want.hosts[0]); err == nil {
			t.Errorf("%s verifies against the other CA", kind)
		}
	}
	for _, kind := range []pkiplan.Kind{pkiplan.GatewayClient, pkiplan.Operator, pkiplan.User} {
		if leaf := d.certs[kind]; len(leaf.DNSNames)+len(leaf.IPAddresses) > 0 || slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
			t.Errorf("client certificate %s can serve: %v %v %v", kind, leaf.DNSNames, leaf.IPAddresses, leaf.ExtKeyUsage)
		}
	}
}

// TestDeploymentPassesThePolicies checks each client certificate of the
// plan against what the services that it calls enforce (lib/identity):
// the gateway's is allowed by the admission, flow-control and watch
// fan-out services' default policy and trusted to assert users; the
// store's passes the organization check of raft connections at both
// ends; the admin's logs in to the API only. The store's own method
// policy is checked against the plan in services/store.
func TestDeploymentPassesThePolicies(t *testing.T) {
	d := issueDeployment(t, pkiplan.Loopback(), pkiplan.Loopback())
	client := func(kind pkiplan.Kind, ca *pki.CA) *x509.Certificate {
		t.Helper()
		chains, err := verify(d.certs[kind], ca, x509.ExtKeyUsageClientAuth, "")
		if err != nil {
			t.Fatalf("%s is no client certificate of its CA: %v", kind, err)
		}
		return chains[0][0]
	}

	gateway := client(pkiplan.GatewayClient, d.cas.Internal)
	for _, svc := range []string{"meridian.admission.v1.AdmissionService", "meridian.flowcontrol.v1.FlowControlService", "meridian.watch.v1.WatchService"} {
		if err := identity.ServiceCallers(svc, nil).Authorize(gateway, "/"+svc+"/Any"); err != nil {
			t.Errorf("gateway calling %s: %v", svc, err)
		}
	}
	if !identity.TrustOrganization(identity.GatewayOrganization)(gateway) {
		t.Error("the services do not trust the gateway to assert users")
	}
	for _, kind := range []pkiplan.Kind{pkiplan.WatchFanout, pkiplan.Store, pkiplan.Operator} {
		leaf := client(kind, d.cas.Internal)
		if identity.TrustOrganization(identity.GatewayOrganization)(leaf) {
			t.Errorf("%s may assert users", kind)
		}
		if err := identity.ServiceCallers("meridian.admission.v1.AdmissionService", nil).Authorize(leaf, "/meridian.admission.v1.AdmissionService/Any"); err == nil {
			t.Errorf("%s may call admission", kind)
		}
	}

	// Raft: each member dials with its certificate as a client and serves
	// with it; both ends require the store-peer organization.
	store := d.certs[pkiplan.Store]
	serverChains, err := verify(store, d.cas.Internal, x509.ExtKeyUsageServerAuth, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	clientChains, err := verify(store, d.cas.Internal, x509.ExtKeyUsageClientAuth, "")
	if err != nil {
		t.Fatal(err)
	}
	raft := identity.RequireOrganization(&tls.Config{}, identity.StorePeerOrganization).VerifyConnection
	for _, chains := range [][][]*x509.Certificate{serverChains, clientChains} {
		if err := raft(tls.ConnectionState{VerifiedChains: chains}); err != nil {
			t.Errorf("raft refuses a member: %v", err)
		}
	}
	wfChains, err := verify(d.certs[pkiplan.WatchFanout], d.cas.Internal, x509.ExtKeyUsageClientAuth, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := raft(tls.ConnectionState{VerifiedChains: wfChains}); err == nil {
		t.Error("raft accepts the watch fan-out tier")
	}

	admin := client(pkiplan.User, d.cas.API)
	if admin.Subject.CommonName != "admin" || !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin subject %s", admin.Subject)
	}
	for kind, leaf := range d.certs {
		_, err := verify(leaf, d.cas.API, x509.ExtKeyUsageClientAuth, "")
		if login := err == nil; login != (kind == pkiplan.User) {
			t.Errorf("%s logs in to the API: %t", kind, login)
		}
	}
}

// TestServiceCert covers names, hosts and the subject of one certificate.
func TestServiceCert(t *testing.T) {
	hosts, err := pkiplan.ParseHosts("10.0.0.1, store-0.example,10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if hosts.String() != "store-0.example,10.0.0.1" {
		t.Fatalf("hosts %s", hosts)
	}
	c, err := pkiplan.ServiceCert(pkiplan.Store, "store-0", hosts)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "store-0" || c.Spec.CommonName != "meridian-store-0" || c.Signer != pkiplan.InternalAuthority ||
		!c.Spec.Server || !c.Spec.Client || !slices.Equal(c.Spec.Organizations, []string{identity.StorePeerOrganization}) {
		t.Fatalf("store-0: %+v", c)
	}
	if c.CertFile("/d") != "/d/pki/store-0.crt" || c.KeyFile("/d") != "/d/pki/store-0.key" || c.Path("/d", pkiplan.InternalCAFile) != "/d/pki/internal-ca.crt" {
		t.Fatalf("files %s %s", c.CertFile("/d"), c.KeyFile("/d"))
	}

	for _, bad := range []struct {
		kind  pkiplan.Kind
		name  string
		hosts pkiplan.Hosts
	}{
		{"etcd", "", hosts},
		{pkiplan.User, "", hosts},
		{pkiplan.Store, "../store", hosts},
		{pkiplan.Store, ".store", hosts},
		{pkiplan.Store, "", pkiplan.Hosts{}},
		{pkiplan.Operator, "", hosts},
	} {
		if _, err := pkiplan.ServiceCert(bad.kind, bad.name, bad.hosts); !errors.Is(err, pkiplan.ErrInvalid) {
			t.Errorf("%s %q %s: %v, want ErrInvalid", bad.kind, bad.name, bad.hosts, err)
		}
	}
	if _, err := pkiplan.ParseHosts("ok.example,Bad_Name,-x"); !errors.Is(err, pkiplan.ErrInvalid) {
		t.Errorf("bad hosts: %v", err)
	}
	if h, err := pkiplan.ParseHosts("*.store.example", "::1"); err != nil || len(h.DNSNames) != 1 || !h.IPs[0].Equal(net.IPv6loopback) {
		t.Errorf("wildcard and IPv6: %v %v", h, err)
	}

	u, err := pkiplan.UserCert("alice", []string{"dev", "ops"}, "")
	if err != nil || u.Name != "alice" || u.Signer != pkiplan.APIAuthority || u.Spec.CommonName != "alice" || !slices.Equal(u.Spec.Organizations, []string{"dev", "ops"}) {
		t.Fatalf("user: %+v %v", u, err)
	}
	if _, err := pkiplan.UserCert("system:serviceaccount:x:y", nil, ""); !errors.Is(err, pkiplan.ErrInvalid) {
		t.Errorf("user name that is no file name: %v", err)
	}
}

// TestCAUses: every CA flag of every use is listed under its CA.
func TestCAUses(t *testing.T) {
	has := func(uses []pkiplan.Use, command, flag string) bool {
		return slices.ContainsFunc(uses, func(u pkiplan.Use) bool { return u.Command == command && u.Flags[0].Name == flag })
	}
	internal, api := pkiplan.CAUses(pkiplan.InternalAuthority), pkiplan.CAUses(pkiplan.APIAuthority)
	for _, want := range [][2]string{{"store", "--client-ca-file"}, {"store", "--peer-ca-file"}, {"watchfanout", "--store-ca-file"}, {"apigateway", "--service-ca-file"}, {"store", "--cacert"}} {
		if !has(internal, want[0], want[1]) {
			t.Errorf("internal CA: %s %s missing", want[0], want[1])
		}
	}
	if !has(api, "apigateway", "--client-ca-file") || has(api, "store", "--client-ca-file") {
		t.Errorf("API CA uses: %+v", api)
	}
}
