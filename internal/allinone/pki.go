package allinone

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
)

// certs are the certificates of one all-in-one control plane, kept in
// <data-dir>/pki so that a restart reuses them (and the kubeconfig written
// earlier keeps working).
type certs struct {
	ca *pki.CA
	// apiserver serves the HTTPS API.
	apiserver tls.Certificate
	// admin is the kubeconfig's client certificate (CN=admin,
	// O=system:masters).
	admin pki.KeyPair
	// gateway is the gateway's client certificate towards the other
	// services; O=meridian:gateways lets it assert users.
	gateway tls.Certificate
	// services serve the internal gRPC APIs, one per service.
	services map[string]tls.Certificate
}

// serviceNames are the internal services that get a serving certificate.
var serviceNames = []string{"store", "admission", "flowcontrol", "watchfanout"}

func loadCerts(dir string, apiHost string) (*certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki dir: %w", err)
	}
	ca, err := pki.LoadOrCreateCA(dir, "meridian-ca")
	if err != nil {
		return nil, err
	}
	c := &certs{ca: ca, services: map[string]tls.Certificate{}}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}

	apiIPs, apiDNS := append([]net.IP(nil), loopback...), []string{"localhost"}
	if ip := net.ParseIP(apiHost); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		apiIPs = append(apiIPs, ip)
	} else if ip == nil && apiHost != "" && apiHost != "localhost" {
		apiDNS = append(apiDNS, apiHost)
	}
	if c.apiserver, err = issue(ca, dir, "apiserver", pki.CertSpec{CommonName: "meridian-apiserver", DNSNames: apiDNS, IPAddresses: apiIPs, Server: true}); err != nil {
		return nil, err
	}
	if c.admin, err = ca.LoadOrIssue(dir, "admin", pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true}); err != nil {
		return nil, err
	}
	if c.gateway, err = issue(ca, dir, "apigateway-client", pki.CertSpec{CommonName: "meridian-apigateway", Organizations: []string{identity.GatewayOrganization}, Client: true}); err != nil {
		return nil, err
	}
	for _, name := range serviceNames {
		// Client usage too: a service dials others with its own certificate
		// (watchfanout follows the store).
		cert, err := issue(ca, dir, name, pki.CertSpec{CommonName: "meridian-" + name, DNSNames: []string{"localhost"}, IPAddresses: loopback, Server: true, Client: true})
		if err != nil {
			return nil, err
		}
		c.services[name] = cert
	}
	return c, nil
}

func issue(ca *pki.CA, dir, name string, spec pki.CertSpec) (tls.Certificate, error) {
	kp, err := ca.LoadOrIssue(dir, name, spec)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate %s: %w", filepath.Join(dir, name), err)
	}
	return kp.TLSCertificate()
}
