package allinone

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
)

// The PKI of an all-in-one control plane: two trust domains, each with its
// own CA, so that no certificate of one is accepted by the other.
//
//   - The API CA signs the API's serving certificate and its users' client
//     certificates (the admin kubeconfig's). The API trusts it, and only
//     it, for client certificates; the kubeconfig carries it to verify the
//     API. No internal service trusts it.
//   - The internal CA signs every service's serving and client
//     certificate. The services trust it, and only it; each accepts only
//     the identities (certificate organizations) that call it. Its
//     certificates cannot log in to the API.
//
// The data directory:
//
//	ca/api/ca.crt, ca.key            the API CA
//	ca/internal/ca.crt, ca.key       the internal CA
//	pki/api-ca.crt                   the API CA's certificate
//	pki/internal-ca.crt              the internal CA's certificate
//	pki/apiserver.crt, .key          the API's serving certificate (API CA)
//	pki/admin.crt, .key              CN=admin, O=system:masters (API CA)
//	pki/apigateway-client.crt, .key  the gateway's client certificate, O=meridian:gateways
//	pki/store.crt, .key              the store's, O=meridian:store-peers (server and client)
//	pki/watchfanout.crt, .key        watchfanout's, O=meridian:watchfanout (server and client)
//	pki/admission.crt, .key          serving only
//	pki/flowcontrol.crt, .key        serving only
//	pki/operator.crt, .key           O=meridian:operators, for the store CLI and tests
//
// CA keys stay under ca/ (mode 0700): pki/ holds what the services read,
// and no key there can sign a certificate. A data directory of the
// earlier layout, with one CA at pki/ca.crt and pki/ca.key, has that CA
// retired at start: its key is deleted, new CAs are created and every
// certificate is issued again (see retireSingleCA).
const (
	caDirName      = "ca"
	pkiDirName     = "pki"
	apiCAFile      = "api-ca.crt"
	internalCAFile = "internal-ca.crt"
)

// certs are the certificates of one all-in-one control plane, reused
// across restarts (so the kubeconfig written earlier keeps working).
type certs struct {
	// apiCA and internalCA verify what each CA signed.
	apiCA, internalCA *pki.CA
	// apiserver serves the HTTPS and gRPC APIs.
	apiserver tls.Certificate
	// admin is the kubeconfig's client certificate (CN=admin,
	// O=system:masters).
	admin pki.KeyPair
	// gateway is the gateway's client certificate towards the other
	// services; O=meridian:gateways lets it call them and assert users.
	gateway tls.Certificate
	// services serve the internal gRPC APIs, one per service; the store's
	// and watchfanout's are their client certificates too.
	services map[string]tls.Certificate
}

// serviceSpecs are the internal services' certificates: each serves on
// loopback; the store (towards its peers) and watchfanout (towards the
// store) also dial with theirs.
var serviceSpecs = map[string]pki.CertSpec{
	"store":       {CommonName: "meridian-store", Organizations: []string{identity.StorePeerOrganization}, Server: true, Client: true},
	"watchfanout": {CommonName: "meridian-watchfanout", Organizations: []string{identity.WatchFanoutOrganization}, Server: true, Client: true},
	"admission":   {CommonName: "meridian-admission", Server: true},
	"flowcontrol": {CommonName: "meridian-flowcontrol", Server: true},
}

// loadCerts loads or creates the two CAs under dataDir/ca and the
// certificates under dataDir/pki (see the layout above).
func loadCerts(dataDir, apiHost string, log *slog.Logger) (*certs, error) {
	caDir, dir := filepath.Join(dataDir, caDirName), filepath.Join(dataDir, pkiDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki dir: %w", err)
	}
	if err := retireSingleCA(dir, log); err != nil {
		return nil, err
	}
	apiCA, err := pki.LoadOrCreateCA(filepath.Join(caDir, "api"), "meridian-api-ca")
	if err != nil {
		return nil, err
	}
	internalCA, err := pki.LoadOrCreateCA(filepath.Join(caDir, "internal"), "meridian-internal-ca")
	if err != nil {
		return nil, err
	}
	for name, ca := range map[string]*pki.CA{apiCAFile: apiCA, internalCAFile: internalCA} {
		if err := ca.WriteCert(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	c := &certs{apiCA: apiCA, internalCA: internalCA, services: map[string]tls.Certificate{}}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}

	apiIPs, apiDNS := append([]net.IP(nil), loopback...), []string{"localhost"}
	if ip := net.ParseIP(apiHost); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		apiIPs = append(apiIPs, ip)
	} else if ip == nil && apiHost != "" && apiHost != "localhost" {
		apiDNS = append(apiDNS, apiHost)
	}
	if c.apiserver, err = issue(apiCA, dir, "apiserver", pki.CertSpec{CommonName: "meridian-apiserver", DNSNames: apiDNS, IPAddresses: apiIPs, Server: true}); err != nil {
		return nil, err
	}
	if c.admin, err = apiCA.LoadOrIssue(dir, "admin", pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true}); err != nil {
		return nil, err
	}
	if c.gateway, err = issue(internalCA, dir, "apigateway-client", pki.CertSpec{CommonName: "meridian-apigateway", Organizations: []string{identity.GatewayOrganization}, Client: true}); err != nil {
		return nil, err
	}
	if _, err := issue(internalCA, dir, "operator", pki.CertSpec{CommonName: "meridian-operator", Organizations: []string{identity.OperatorOrganization}, Client: true}); err != nil {
		return nil, err
	}
	for name, spec := range serviceSpecs {
		spec.DNSNames, spec.IPAddresses = []string{"localhost"}, loopback
		cert, err := issue(internalCA, dir, name, spec)
		if err != nil {
			return nil, err
		}
		c.services[name] = cert
	}
	return c, nil
}

// retireSingleCA deletes the one CA of a data directory of the earlier
// layout (pki/ca.crt and pki/ca.key), which signed the users' and the
// services' certificates alike: every certificate it signed could log in
// to the API and call every service. Its certificates are then issued
// again by the new CAs (LoadOrIssue reissues what another CA signed), and
// the admin kubeconfig is rewritten; copies of the old one stop working.
func retireSingleCA(dir string, log *slog.Logger) error {
	retired := false
	for _, f := range []string{filepath.Join(dir, "ca.key"), filepath.Join(dir, "ca.crt")} {
		switch err := os.Remove(f); {
		case err == nil:
			retired = true
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("pki: retire the single CA: %w", err)
		}
	}
	if retired {
		log.Warn("retired the single CA of an earlier meridian: new API and internal CAs sign new certificates; use the rewritten admin kubeconfig",
			"ca", filepath.Join(dir, "ca.crt"))
	}
	return nil
}

func issue(ca *pki.CA, dir, name string, spec pki.CertSpec) (tls.Certificate, error) {
	kp, err := ca.LoadOrIssue(dir, name, spec)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate %s: %w", filepath.Join(dir, name), err)
	}
	return kp.TLSCertificate()
}
