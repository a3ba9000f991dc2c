// Package admissiontest runs the real admission service — its gRPC server
// and policy pipeline — over a policy set that a test scripts, for tests of
// the service's clients (the gateway follows its scope and calls Admit).
// Production code does not import it.
package admissiontest

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
	"github.com/meridian-cp/meridian/services/admission/internal/server"
)

// Scope and Rule describe which requests a policy set could match (see
// package policy).
type (
	Scope = policy.Scope
	Rule  = policy.Rule
)

// DenyPrefix starts the names of objects that Policies denies.
const DenyPrefix = "deny-"

// Policies is a scripted policy set. Its scope is what the test sets. It
// matches every request it is asked about, whatever its scope says, so
// that a test sees which requests reached the service: one policy that
// denies objects named DenyPrefix… (403) and warns "admissiontest:
// admitted" about the others. It is safe for concurrent use.
type Policies struct {
	calls atomic.Int64

	mu struct {
		sync.Mutex
		scope   Scope
		changed chan struct{} // closed and replaced by SetScope
	}
}

var _ policy.Set = (*Policies)(nil)

// NewPolicies returns a set whose scope is sc.
func NewPolicies(sc Scope) *Policies {
	p := &Policies{}
	p.mu.scope = sc
	p.mu.changed = make(chan struct{})
	return p
}

// SetScope changes the scope; the service sends it to every scope stream.
func (p *Policies) SetScope(sc Scope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.scope = sc
	close(p.mu.changed)
	p.mu.changed = make(chan struct{})
}

// Calls is the number of Admit calls the set has been asked about.
func (p *Policies) Calls() int64 { return p.calls.Load() }

// Matching counts the call and returns the scripted policy.
func (p *Policies) Matching(*admissionv1.AdmitRequest) []policy.Policy {
	p.calls.Add(1)
	return []policy.Policy{denyPrefixed{}}
}

// Scope returns the scope the test set.
func (p *Policies) Scope() (policy.Scope, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.scope, p.mu.changed
}

// denyPrefixed denies objects named DenyPrefix… and warns about others.
type denyPrefixed struct{}

func (denyPrefixed) Evaluate(_ context.Context, req *admissionv1.AdmitRequest) (policy.Decision, error) {
	if strings.HasPrefix(req.GetName(), DenyPrefix) {
		return policy.Decision{Denial: &policy.Denial{Code: 403, Message: "admissiontest: denied " + req.GetName()}}, nil
	}
	return policy.Decision{Warnings: []string{"admissiontest: admitted"}}, nil
}

// Service is a running admission service, plaintext, on loopback.
type Service struct {
	// Addr is the address it serves on.
	Addr string

	srv    *grpc.Server
	admit  *server.Server
	served chan error
	once   sync.Once
}

// Options are the ways a test Service differs from the real one.
type Options struct {
	// Older makes the service answer WatchScope UNIMPLEMENTED, as a
	// version older than that call does.
	Older bool
	// Registerer receives the service's metrics; nil means none.
	Registerer prometheus.Registerer
}

// Start serves the admission service with a policy set on addr
// ("127.0.0.1:0" picks a port; a stopped Service's Addr starts it again
// there) until Stop or the end of the test. It is the service's own gRPC
// server (lib's interceptors, the policy pipeline, Close ending the scope
// streams) without TLS. The set is a *Policies; the service's own tests
// pass any policy.Set.
func Start(t testing.TB, addr string, set policy.Set, opts Options) *Service {
	t.Helper()
	srv, _, err := grpcserver.New(grpcserver.Options{Service: "admission"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(set, opts.Registerer)
	if err != nil {
		t.Fatal(err)
	}
	var impl admissionv1.AdmissionServiceServer = s
	if opts.Older {
		impl = older{s}
	}
	admissionv1.RegisterAdmissionServiceServer(srv, impl)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	svc := &Service{Addr: lis.Addr().String(), srv: srv, admit: s, served: make(chan error, 1)}
	go func() { svc.served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		if err := svc.Stop(); err != nil {
			t.Error(err)
		}
	})
	return svc
}

// CloseStreams ends every scope stream with UNAVAILABLE, and each one
// opened later at once, while Admit is still served: what app.Close does
// before the gRPC server stops.
func (s *Service) CloseStreams() { s.admit.Close() }

// Stop closes the service as app.Close does (scope streams end with
// UNAVAILABLE, Admit calls in flight finish) and waits until it no longer
// serves. It is safe to call more than once.
func (s *Service) Stop() error {
	var err error
	s.once.Do(func() {
		s.admit.Close()
		s.srv.GracefulStop()
		if serr := <-s.served; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
			err = serr
		}
	})
	return err
}

// older is the service without WatchScope.
type older struct{ *server.Server }

func (older) WatchScope(*admissionv1.WatchScopeRequest, grpc.ServerStreamingServer[admissionv1.WatchScopeResponse]) error {
	return status.Error(codes.Unimplemented, "unknown method WatchScope for service meridian.admission.v1.AdmissionService")
}
