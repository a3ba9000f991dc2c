package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Policy says which callers may call which gRPC methods of a server, by the
// organizations (O=) of their verified client certificates.
//
// Keys are full method names ("/meridian.store.v1.KVService/Range") or
// every method of a service (Service("meridian.store.v1.KVService"), that
// is "/meridian.store.v1.KVService/*"); values are the organizations
// allowed, any one of which the caller's certificate must carry. A method's
// own key takes precedence over its service's. The methods of the gRPC
// health service (grpc.health.v1.Health) are open to every caller, so that
// probes need no certificate. Every other method no key covers is refused:
// a method added to a service is closed until the policy names its
// callers.
//
// A refused call fails with PermissionDenied, or Unauthenticated when the
// caller presented no verified certificate, before its handler runs.
type Policy map[string][]string

// Service returns the Policy key covering every method of the gRPC service
// named name (e.g. "meridian.store.v1.KVService").
func Service(name string) string { return "/" + name + "/*" }

// healthPrefix starts the full method names of the gRPC health service.
const healthPrefix = "/grpc.health.v1.Health/"

// Validate reports every malformed key and every key without
// organizations.
func (p Policy) Validate() error {
	var errs []error
	for k, orgs := range p {
		svc, method, ok := strings.Cut(strings.TrimPrefix(k, "/"), "/")
		if !strings.HasPrefix(k, "/") || !ok || svc == "" || method == "" || strings.Contains(method, "/") ||
			(strings.Contains(method, "*") && method != "*") {
			errs = append(errs, fmt.Errorf("identity: policy key %q is neither /service/method nor /service/*", k))
		}
		if len(orgs) == 0 || slices.Contains(orgs, "") {
			errs = append(errs, fmt.Errorf("identity: policy key %q names no organization", k))
		}
	}
	return errors.Join(errs...)
}

// access is a Policy split by key kind, so that a call's lookup allocates
// nothing.
type access struct {
	methods  map[string][]string // by full method name
	services map[string][]string // by "/service/"
}

func (p Policy) compile() access {
	a := access{methods: map[string][]string{}, services: map[string][]string{}}
	for k, orgs := range p {
		orgs = slices.Clone(orgs)
		if svc, ok := strings.CutSuffix(k, "*"); ok {
			a.services[svc] = orgs
		} else {
			a.methods[k] = orgs
		}
	}
	return a
}

// authorize returns nil when the caller of ctx's call may call method.
func (a access) authorize(ctx context.Context, method string) error {
	cert, _ := VerifiedPeer(ctx)
	return a.authorizeCert(cert, method)
}

// authorizeCert returns nil when a caller whose verified certificate is
// cert (nil: none) may call method.
func (a access) authorizeCert(cert *x509.Certificate, method string) error {
	if strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	orgs, ok := a.methods[method]
	if !ok {
		if i := strings.LastIndexByte(method, '/'); i > 0 {
			orgs, ok = a.services[method[:i+1]]
		}
	}
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s is open to no caller", method)
	}
	if cert == nil {
		return status.Errorf(codes.Unauthenticated, "%s needs a verified client certificate with organization %s",
			method, strings.Join(orgs, " or "))
	}
	for _, o := range orgs {
		if slices.Contains(cert.Subject.Organization, o) {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "%s needs a client certificate with organization %s; the caller's (CN=%q) has %s",
		method, strings.Join(orgs, " or "), cert.Subject.CommonName, describeOrgs(cert))
}

// Authorize returns nil when a caller whose verified client certificate
// is cert (nil: none) may call the full method name method, and otherwise
// the error the interceptors answer that call with. It does not verify
// cert: the TLS handshake does that before the interceptors run. For
// tools and tests that ask what a certificate may call; servers use the
// interceptors.
func (p Policy) Authorize(cert *x509.Certificate, method string) error {
	return p.compile().authorizeCert(cert, method)
}

func describeOrgs(cert *x509.Certificate) string {
	if len(cert.Subject.Organization) == 0 {
		return "none"
	}
	return strings.Join(cert.Subject.Organization, ", ")
}

// UnaryServerInterceptor refuses the unary calls p does not allow (see
// Policy). The policy is copied: changing p afterwards changes nothing.
func (p Policy) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	a := p.compile()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming calls.
func (p Policy) StreamServerInterceptor() grpc.StreamServerInterceptor {
	a := p.compile()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.authorize(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// RequireOrganization returns a copy of conf whose handshakes fail unless
// the peer's verified certificate carries the organization org: for TLS
// connections that carry no gRPC calls (the store's raft transport), where
// a Policy cannot apply. conf must verify the peer (a server's ClientAuth
// tls.RequireAndVerifyClientCert; a client's RootCAs): an unverified peer
// is refused too. A VerifyConnection already set still runs first.
func RequireOrganization(conf *tls.Config, org string) *tls.Config {
	c := conf.Clone()
	prev := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return fmt.Errorf("identity: the peer presented no verified certificate; organization %s is required", org)
		}
		leaf := cs.VerifiedChains[0][0]
		if !slices.Contains(leaf.Subject.Organization, org) {
			return fmt.Errorf("identity: the peer's certificate (CN=%q) has organization %s, not %s",
				leaf.Subject.CommonName, describeOrgs(leaf), org)
		}
		return nil
	}
	return c
}

// ServiceCallers returns the Policy of a server with one service (besides
// health): every method of the gRPC service named service is open to the
// organizations orgs; nil orgs means the gateways
// (GatewayOrganization), the callers of meridian's admission, flow-control
// and watchfanout services.
func ServiceCallers(service string, orgs []string) Policy {
	if orgs == nil {
		orgs = []string{GatewayOrganization}
	}
	return Policy{Service(service): slices.Clone(orgs)}
}
