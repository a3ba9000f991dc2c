// Package pkiplan is the plan of a meridian deployment's certificates: the
// two certificate authorities, each certificate the services, the
// administrator and the operators need, what each carries (subject,
// usages, subject alternative names) and which CA signs it, where each is
// kept, and which flags of which command take it.
//
// It is the one list: the all-in-one binary issues its certificates from
// it, `meridian pki` issues a distributed deployment's, and
// docs/certificates.md describes it.
//
// # Trust domains
//
// The API CA signs the API's serving certificate and its users' client
// certificates; the gateway trusts it, and only it, for client
// certificates. The internal CA signs every service's certificate; the
// services trust it, and only it, and each lets call it only the
// identities (certificate organizations, lib/identity) it serves. No
// certificate of one domain is accepted by the other.
package pkiplan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
)

// ErrInvalid reports a certificate that cannot be planned: an unknown kind,
// a bad name or host.
var ErrInvalid = errors.New("pkiplan: invalid certificate")

// Authority names a certificate authority of a deployment.
type Authority string

// The two authorities.
const (
	// APIAuthority signs the API's serving certificate and its users'
	// client certificates.
	APIAuthority Authority = "api"
	// InternalAuthority signs the services' certificates.
	InternalAuthority Authority = "internal"
)

// Authorities returns both authorities, API first.
func Authorities() []Authority { return []Authority{APIAuthority, InternalAuthority} }

// CommonName is the authority's certificate's subject CN.
func (a Authority) CommonName() string { return "meridian-" + string(a) + "-ca" }

// Kind is what a certificate is for. Each kind has one signer, one set of
// organizations and usages, and the same flags take it.
type Kind string

// The kinds of certificate of a deployment.
const (
	// Store is a store member's certificate: it serves the store's gRPC
	// API and raft, and dials the other members (O=meridian:store-peers).
	Store Kind = "store"
	// WatchFanout is a watch fan-out replica's: it serves the gateways
	// and dials the store (O=meridian:watchfanout).
	WatchFanout Kind = "watchfanout"
	// Admission is the admission service's: it serves the gateways and
	// dials the store (O=meridian:admission).
	Admission Kind = "admission"
	// FlowControl is the flow-control service's: it serves the gateways
	// and dials the store (O=meridian:flowcontrol).
	FlowControl Kind = "flowcontrol"
	// APIServer is the gateway's serving certificate for the Kubernetes
	// HTTPS API and the gRPC API, signed by the API CA.
	APIServer Kind = "apiserver"
	// GatewayClient is the gateway's client certificate towards the other
	// services (O=meridian:gateways): it calls them and asserts users.
	GatewayClient Kind = "apigateway-client"
	// Operator is an operator's client certificate for the store CLI
	// (O=meridian:operators): membership, compaction, snapshots, status.
	Operator Kind = "operator"
	// User is an API user's client certificate (CN = user name, O =
	// groups), signed by the API CA: the kubeconfig's.
	User Kind = "user"
)

// Kinds returns the kinds ServiceCert (and `meridian pki issue
// --service`) accepts, in the order a deployment starts them.
func Kinds() []Kind {
	return []Kind{Store, WatchFanout, Admission, FlowControl, APIServer, GatewayClient, Operator}
}

// File names a file of a deployment's directory a flag takes.
type File int

// The files flags take.
const (
	// CertFile is the certificate's own .crt file.
	CertFile File = iota
	// KeyFile is the certificate's .key file.
	KeyFile
	// APICAFile is the API CA's certificate.
	APICAFile
	// InternalCAFile is the internal CA's certificate.
	InternalCAFile
)

// Flag is a command-line flag and the file it takes.
type Flag struct {
	// Name is the flag, with its dashes ("--tls-cert-file").
	Name string
	// File is what the flag takes.
	File File
}

// Use is one way a command takes a certificate.
type Use struct {
	// Command is the binary: store, watchfanout, admission, flowcontrol,
	// apigateway, or kubectl.
	Command string
	// Purpose says what the command does with the certificate.
	Purpose string
	// Flags are the flags, and the files they take.
	Flags []Flag
}

// kindInfo is the fixed part of a kind's certificates.
type kindInfo struct {
	signer         Authority
	orgs           []string
	server, client bool
	about          string
	uses           []Use
}

func serving(command string) Use {
	return Use{Command: command, Purpose: "serves its gRPC API; callers must present an internal certificate", Flags: []Flag{
		{"--tls-cert-file", CertFile}, {"--tls-key-file", KeyFile}, {"--client-ca-file", InternalCAFile},
	}}
}

// kinds holds each kind's signer, subject organizations, usages and uses.
var kinds = map[Kind]kindInfo{
	Store: {
		signer: InternalAuthority, orgs: []string{identity.StorePeerOrganization}, server: true, client: true,
		about: "a store member: serves the store's gRPC API and raft, dials the other members (raft, forwarding, joining)",
		uses: []Use{{Command: "store", Purpose: "serves the gRPC API and raft, and dials the other members", Flags: []Flag{
			{"--tls-cert-file", CertFile}, {"--tls-key-file", KeyFile}, {"--client-ca-file", InternalCAFile}, {"--peer-ca-file", InternalCAFile},
		}}},
	},
	WatchFanout: {
		signer: InternalAuthority, orgs: []string{identity.WatchFanoutOrganization}, server: true, client: true,
		about: "a watch fan-out replica: serves the gateways, reads and watches the store",
		uses: []Use{serving("watchfanout"), {Command: "watchfanout", Purpose: "reads and watches the store", Flags: []Flag{
			{"--store-cert-file", CertFile}, {"--store-key-file", KeyFile}, {"--store-ca-file", InternalCAFile},
		}}},
	},
	Admission: {
		signer: InternalAuthority, orgs: []string{identity.AdmissionOrganization}, server: true, client: true,
		about: "the admission service: serves the gateways, reads and watches the store (its policies, bindings, params and namespaces)",
		uses: []Use{serving("admission"), {Command: "admission", Purpose: "reads and watches the store", Flags: []Flag{
			{"--store-cert-file", CertFile}, {"--store-key-file", KeyFile}, {"--store-ca-file", InternalCAFile},
		}}},
	},
	FlowControl: {
		signer: InternalAuthority, orgs: []string{identity.FlowControlOrganization}, server: true, client: true,
		about: "the flow-control service: serves the gateways, reads and watches the store (its configuration objects)",
		uses: []Use{serving("flowcontrol"), {Command: "flowcontrol", Purpose: "reads and watches the store", Flags: []Flag{
			{"--store-cert-file", CertFile}, {"--store-key-file", KeyFile}, {"--store-ca-file", InternalCAFile},
		}}},
	},
	APIServer: {
		signer: APIAuthority, server: true,
		about: "the gateway's Kubernetes HTTPS API and gRPC API; clients verify it with the API CA",
		uses: []Use{{Command: "apigateway", Purpose: "serves the HTTPS and gRPC APIs; users' client certificates are verified against the API CA", Flags: []Flag{
			{"--tls-cert-file", CertFile}, {"--tls-key-file", KeyFile}, {"--client-ca-file", APICAFile},
		}}},
	},
	GatewayClient: {
		signer: InternalAuthority, orgs: []string{identity.GatewayOrganization}, client: true,
		about: "the gateway towards the other services: the store's data RPCs, the watch fan-out tier, admission and flow control; it asserts users",
		uses: []Use{{Command: "apigateway", Purpose: "calls the store, the watch fan-out tier, admission and flow control", Flags: []Flag{
			{"--service-cert-file", CertFile}, {"--service-key-file", KeyFile}, {"--service-ca-file", InternalCAFile},
		}}},
	},
	Operator: {
		signer: InternalAuthority, orgs: []string{identity.OperatorOrganization}, client: true,
		about: "an operator: the store's membership, leadership transfer, compaction, snapshots and status; no keys",
		uses: []Use{{Command: "store", Purpose: "the store CLI (status, member, snapshot, ...)", Flags: []Flag{
			{"--cert", CertFile}, {"--key", KeyFile}, {"--cacert", InternalCAFile},
		}}},
	},
	User: {
		signer: APIAuthority, client: true,
		about: "an API user (CN = user, O = groups), in a kubeconfig",
		uses: []Use{{Command: "kubectl", Purpose: "authenticates to the API as the user (embedded in the kubeconfig `meridian pki kubeconfig` writes)", Flags: []Flag{
			{"--client-certificate", CertFile}, {"--client-key", KeyFile}, {"--certificate-authority", APICAFile},
		}}},
	},
}

// Cert is one planned certificate.
type Cert struct {
	// Kind is what it is for.
	Kind Kind
	// Name is its files' base name in CertDir: <Name>.crt and <Name>.key.
	Name string
	// Signer is the authority that signs it.
	Signer Authority
	// Spec is its subject, subject alternative names and usages.
	Spec pki.CertSpec
	// About says in a sentence what it is for.
	About string
	// Uses are the commands and flags that take it.
	Uses []Use
}

// ServiceCert plans a certificate of one of Kinds named name (empty: the
// kind's own name, e.g. "store"; "store-0" for one member of several),
// with subject CN "meridian-<name>". Serving certificates (store,
// watchfanout, admission, flowcontrol, apiserver) are valid for hosts,
// which must name at least one; client-only ones (apigateway-client,
// operator) take no hosts.
func ServiceCert(kind Kind, name string, hosts Hosts) (Cert, error) {
	info, ok := kinds[kind]
	if !ok || kind == User {
		return Cert{}, fmt.Errorf("%w: unknown kind %q (one of %s)", ErrInvalid, kind, KindNames())
	}
	if name == "" {
		name = string(kind)
	}
	if err := checkName(name); err != nil {
		return Cert{}, err
	}
	switch {
	case info.server && hosts.Empty():
		return Cert{}, fmt.Errorf("%w: a %s certificate serves, so it needs hosts (the names and addresses it is dialed at)", ErrInvalid, kind)
	case !info.server && !hosts.Empty():
		return Cert{}, fmt.Errorf("%w: a %s certificate is a client certificate only; it takes no hosts", ErrInvalid, kind)
	}
	spec := pki.CertSpec{
		CommonName:    "meridian-" + name,
		Organizations: slices.Clone(info.orgs),
		Server:        info.server,
		Client:        info.client,
	}
	if info.server {
		spec.DNSNames, spec.IPAddresses = slices.Clone(hosts.DNSNames), slices.Clone(hosts.IPs)
	}
	return info.cert(kind, name, spec), nil
}

// UserCert plans an API user's client certificate: CN user, O groups,
// signed by the API CA, kept as name (empty: the user name, which must
// then be a valid file name).
func UserCert(user string, groups []string, name string) (Cert, error) {
	if user == "" {
		return Cert{}, fmt.Errorf("%w: empty user name", ErrInvalid)
	}
	if slices.Contains(groups, "") {
		return Cert{}, fmt.Errorf("%w: empty group", ErrInvalid)
	}
	if name == "" {
		name = user
	}
	if err := checkName(name); err != nil {
		return Cert{}, fmt.Errorf("%w (name the files with another name)", err)
	}
	spec := pki.CertSpec{CommonName: user, Organizations: slices.Clone(groups), Client: true}
	return kinds[User].cert(User, name, spec), nil
}

// Admin plans the administrator's client certificate: CN=admin,
// O=system:masters (every permission), kept as "admin".
func Admin() Cert {
	return kinds[User].cert(User, "admin", pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true})
}

// Deployment plans every certificate of a deployment: one per service,
// shared by its replicas, valid for hosts (apiHosts for the API's serving
// certificate), the gateway's client certificate, an operator's and the
// administrator's.
func Deployment(hosts, apiHosts Hosts) ([]Cert, error) {
	var (
		out  []Cert
		errs []error
	)
	for _, k := range Kinds() {
		h := Hosts{}
		switch {
		case k == APIServer:
			h = apiHosts
		case kinds[k].server:
			h = hosts
		}
		c, err := ServiceCert(k, "", h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return append(out, Admin()), nil
}

func (info kindInfo) cert(kind Kind, name string, spec pki.CertSpec) Cert {
	uses := make([]Use, len(info.uses))
	for i, u := range info.uses {
		uses[i] = Use{Command: u.Command, Purpose: u.Purpose, Flags: slices.Clone(u.Flags)}
	}
	return Cert{Kind: kind, Name: name, Signer: info.signer, Spec: spec, About: info.about, Uses: uses}
}

// CAUses returns every flag that takes the authority's certificate, each
// with its command, gathered from the kinds' uses: the CA certificate's
// whole audience.
func CAUses(a Authority) []Use {
	want := InternalCAFile
	if a == APIAuthority {
		want = APICAFile
	}
	var out []Use
	for _, k := range append(Kinds(), User) {
		for _, u := range kinds[k].uses {
			for _, f := range u.Flags {
				if f.File == want {
					out = append(out, Use{Command: u.Command, Purpose: u.Purpose, Flags: []Flag{f}})
				}
			}
		}
	}
	return out
}

// KindNames lists Kinds, comma-separated, for messages.
func KindNames() string {
	ks := Kinds()
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// checkName accepts the names of files in CertDir: a DNS-1123 subdomain
// ("store-0", "admin"), so that no name is a path or hidden.
func checkName(name string) error {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%w: name %q: %s", ErrInvalid, name, strings.Join(msgs, "; "))
	}
	return nil
}
