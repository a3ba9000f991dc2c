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

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pkiplan"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
)

// The PKI of an all-in-one control plane is lib/pkiplan's plan for one
// host: two trust domains, each with its own CA, so that no certificate of
// one is accepted by the other, and every certificate a deployment needs,
// valid for loopback (the API's serving certificate also for the host it
// listens on).
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
// The data directory has pkiplan's layout:
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
//	pki/flowcontrol.crt, .key        flow control's, O=meridian:flowcontrol (server and client)
//	pki/operator.crt, .key           O=meridian:operators, for the store CLI and tests
//
// CA keys stay under ca/ (mode 0700): pki/ holds what the services read,
// and no key there can sign a certificate. A data directory of the
// earlier layout, with one CA at pki/ca.crt and pki/ca.key, has that CA
// retired at start: its key is deleted, new CAs are created and every
// certificate is issued again (see retireSingleCA).

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
	// services serve the internal gRPC APIs, one per service, by
	// pkiplan.Kind ("store", ...); the store's and watchfanout's are
	// their client certificates too.
	services map[string]tls.Certificate
}

// loadCerts loads or creates the two CAs under dataDir/ca and the
// certificates under dataDir/pki (see the layout above) that
// pkiplan.Deployment plans for loopback, the API's for apiHost too.
func loadCerts(dataDir, apiHost string, log *slog.Logger) (*certs, error) {
	if err := os.MkdirAll(filepath.Join(dataDir, pkiplan.CertDir), 0o700); err != nil {
		return nil, fmt.Errorf("pki dir: %w", err)
	}
	if err := retireSingleCA(filepath.Join(dataDir, pkiplan.CertDir), log); err != nil {
		return nil, err
	}
	cas, err := pkiplan.LoadOrCreateCAs(dataDir)
	if err != nil {
		return nil, err
	}
	apiHosts := pkiplan.Loopback()
	if ip := net.ParseIP(apiHost); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		apiHosts = apiHosts.Add(pkiplan.Hosts{IPs: []net.IP{ip}})
	} else if ip == nil && apiHost != "" {
		apiHosts = apiHosts.Add(pkiplan.Hosts{DNSNames: []string{apiHost}})
	}
	plan, err := pkiplan.Deployment(pkiplan.Loopback(), apiHosts)
	if err != nil {
		return nil, err
	}
	c := &certs{apiCA: cas.API, internalCA: cas.Internal, services: map[string]tls.Certificate{}}
	for _, p := range plan {
		kp, err := cas.Issue(dataDir, p)
		if err != nil {
			return nil, err
		}
		cert, err := kp.TLSCertificate()
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", kp.CertFile, err)
		}
		switch p.Kind {
		case pkiplan.APIServer:
			c.apiserver = cert
		case pkiplan.GatewayClient:
			c.gateway = cert
		case pkiplan.User:
			c.admin = kp
		case pkiplan.Operator:
			// For the store CLI and tests; no service presents it.
		default:
			c.services[string(p.Kind)] = cert
		}
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

// serviceAccounts makes the service account token signing key in the
// data directory when missing and returns the gateway's configuration of
// service account tokens: issued by the API's URL (apiAddr) unless
// cfg names an issuer.
func serviceAccounts(cfg Config, apiAddr net.Addr) (gateway.ServiceAccountConfig, error) {
	key, pub := pkiplan.ServiceAccountKeyFile(cfg.DataDir), pkiplan.ServiceAccountPublicKeysFile(cfg.DataDir)
	if _, err := pki.LoadOrCreateSigningKey(key, pub); err != nil {
		return gateway.ServiceAccountConfig{}, fmt.Errorf("allinone: %w", err)
	}
	issuer := cfg.ServiceAccountIssuer
	if issuer == "" {
		issuer = "https://" + apiAddr.String()
	}
	return gateway.ServiceAccountConfig{
		Issuer: issuer, SigningKeyFile: key, KeyFiles: []string{pub}, MaxTokenExpiration: cfg.ServiceAccountMaxTokenExpiration,
	}, nil
}
