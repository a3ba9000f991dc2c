// Package grpcserver assembles the gRPC server of every meridian service,
// so that transport security, keepalive, limits, the stream worker pool and
// the interceptor chain (metrics, logging, panic recovery, access,
// identity) are built in one place and behave the same in each service.
//
// The chain, outermost first:
//
//	metrics → logging → recovery → access → identity → handler
//
// Metrics and logging are outside recovery so that a recovered panic is
// counted and logged with its final code (Internal); access (which
// certificates may call which method, identity.Policy) refuses a call
// before anything reads its metadata.
package grpcserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/inproc"
	"github.com/meridian-cp/meridian/lib/telemetry"
)

// DefaultMaxRecvMsgSize is the largest request message a server accepts
// when Options.MaxRecvMsgSize is zero.
const DefaultMaxRecvMsgSize = 4 << 20

// Keepalive settings. Clients built by lib/grpcclient ping every
// grpcclient.KeepaliveTime (30s), so the enforcement minimum must stay
// below that or the server would close their connections with
// "too_many_pings".
const (
	keepaliveMinTime = 10 * time.Second
	keepaliveTime    = 2 * time.Minute
	keepaliveTimeout = 20 * time.Second
)

// Keepalive returns the keepalive options every meridian gRPC server uses:
// it accepts the pings of lib/grpcclient's clients (every 30s, also on
// idle connections) and pings idle clients itself. A server with gRPC's
// defaults (a 5-minute minimum, no pings without streams) answers those
// clients with GOAWAY "too_many_pings" after three pings, which ends
// every stream of the connection.
func Keepalive() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             keepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    keepaliveTime,
			Timeout: keepaliveTimeout,
		}),
	}
}

// Windows returns the static flow-control windows every meridian gRPC
// server uses, the same as its clients' (see lib/grpcclient for why).
func Windows() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(grpcclient.InitialWindowSize),
		grpc.InitialConnWindowSize(grpcclient.InitialConnWindowSize),
	}
}

// Options configures a service's gRPC server. The zero value is a
// plaintext server without metrics on which no peer may assert a user.
type Options struct {
	// Service names the service in logs, e.g. "store".
	Service string
	// TLS is the server's TLS configuration; nil serves plaintext, for
	// tests only. For mTLS set ClientAuth to tls.RequireAndVerifyClientCert.
	// With TLS set the server also accepts in-memory connections of this
	// process (package inproc) without a handshake, each with the
	// identity its dialer gave it.
	TLS *tls.Config
	// Registerer receives the gRPC server metrics; nil means no metrics.
	Registerer prometheus.Registerer
	// Logger logs panics and, at debug level, every call; nil means
	// slog.Default().
	Logger *slog.Logger
	// Trust decides which mTLS peers may assert users in metadata; nil
	// trusts none.
	Trust identity.TrustFunc
	// Access says which callers, by the organizations of their verified
	// client certificates, may call which methods; health checks are
	// always open. It applies when TLS is set (a plaintext server, for
	// tests, has no certificates to check); nil lets every caller call
	// every method, for servers whose callers are authenticated otherwise
	// (the gateway's public gRPC API).
	Access identity.Policy
	// MaxRecvMsgSize is the largest request message in bytes; 0 means
	// DefaultMaxRecvMsgSize (4 MiB).
	MaxRecvMsgSize int
	// TracerProvider traces every call but health checks, continuing the
	// caller's trace (W3C trace context in metadata); nil or a no-op
	// provider: no tracing work at all (telemetry.GRPCServerInterceptors).
	TracerProvider trace.TracerProvider
	// Extra are more options, after these (a service's own codec).
	Extra []grpc.ServerOption
}

// Validate reports every problem with o at once.
func (o Options) Validate() error {
	var errs []error
	if o.MaxRecvMsgSize < 0 {
		errs = append(errs, fmt.Errorf("grpcserver: MaxRecvMsgSize %d is negative", o.MaxRecvMsgSize))
	}
	if err := o.Access.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("grpcserver: Access: %w", err))
	}
	return errors.Join(errs...)
}

func (o Options) logger() *slog.Logger {
	l := o.Logger
	if l == nil {
		l = slog.Default()
	}
	if o.Service != "" {
		l = l.With("service", o.Service)
	}
	return l
}

// streamWorkers is the size of a server's goroutine pool for streams.
// Streams beyond it (a long watch holds a worker) get a goroutine of their
// own, as without a pool.
const streamWorkers = 32

// StreamWorkers returns the option that runs a server's streams on a pool
// of goroutines instead of a new goroutine each. A new goroutine's stack
// starts small and grows by doubling, each time copying the whole stack,
// while it reads the request, iterates pebble or encodes the reply, on
// every call; pooled goroutines keep their grown stacks.
func StreamWorkers() grpc.ServerOption {
	return grpc.NumStreamWorkers(streamWorkers)
}

// ServerOptions returns the grpc.ServerOptions of a meridian server:
// credentials (TLS when opts.TLS is set, else insecure), keepalive, the
// message size limit and the chained unary and stream interceptors
// described in the package comment, and the tracing stats handler when
// opts.TracerProvider records. Calling it several times with the same
// Registerer is fine: the metric collectors already registered are reused.
func ServerOptions(opts Options) ([]grpc.ServerOption, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	logger := opts.logger()
	var m *metrics
	if opts.Registerer != nil {
		var err error
		if m, err = newMetrics(opts.Registerer); err != nil {
			return nil, err
		}
	}
	maxRecv := opts.MaxRecvMsgSize
	if maxRecv == 0 {
		maxRecv = DefaultMaxRecvMsgSize
	}

	unary, stream := interceptors(opts, logger, m)
	so := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecv),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
	so = append(so, Keepalive()...)
	so = append(so, Windows()...)
	so = append(so, StreamWorkers())
	if opts.TLS != nil {
		so = append(so, grpc.Creds(inproc.ServerCredentials(credentials.NewTLS(opts.TLS))))
	}
	return append(so, opts.Extra...), nil
}

// interceptors are the chains of the package comment, outermost first.
func interceptors(opts Options, logger *slog.Logger, m *metrics) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	unary := []grpc.UnaryServerInterceptor{}
	stream := []grpc.StreamServerInterceptor{}
	// Tracing first: every interceptor after it (metrics, the request
	// log) sees the call's span.
	if u, s := telemetry.GRPCServerInterceptors(opts.TracerProvider); u != nil {
		unary = append(unary, u)
		stream = append(stream, s)
	}
	if m != nil {
		unary = append(unary, m.unaryInterceptor)
		stream = append(stream, m.streamInterceptor)
	}
	unary = append(unary, unaryLogging(logger), unaryRecovery(logger))
	stream = append(stream, streamLogging(logger), streamRecovery(logger))
	if opts.Access != nil && opts.TLS != nil {
		unary = append(unary, opts.Access.UnaryServerInterceptor())
		stream = append(stream, opts.Access.StreamServerInterceptor())
	}
	unary = append(unary, identity.UnaryServerInterceptor(opts.Trust))
	stream = append(stream, identity.StreamServerInterceptor(opts.Trust))
	return unary, stream
}

// handledChains validates opts and returns the interceptor chains of a
// server built with ServerOptions(opts), for calls handled in this
// process without it; with the same Registerer they share its metric
// collectors.
func handledChains(opts Options) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor, error) {
	if err := opts.Validate(); err != nil {
		return nil, nil, err
	}
	var m *metrics
	if opts.Registerer != nil {
		var err error
		if m, err = newMetrics(opts.Registerer); err != nil {
			return nil, nil, err
		}
	}
	unary, stream := interceptors(opts, opts.logger(), m)
	return unary, stream, nil
}

// StreamServerInterceptor returns, as one interceptor, the chain of stream
// interceptors that a server built with ServerOptions(opts) runs every
// stream call through: for a stream call handled in this process without
// the gRPC server (inproc.ServerStream), which must be authorized,
// counted, logged and traced as the server's calls are. Calling it with
// the Registerer of ServerOptions reuses its metric collectors.
func StreamServerInterceptor(opts Options) (grpc.StreamServerInterceptor, error) {
	_, stream, err := handledChains(opts)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return chainStream(stream, srv, ss, info, handler)
	}, nil
}

// UnaryServerChain returns the chain of unary interceptors that a server
// built with ServerOptions(opts) runs every unary call through, as a
// function that binds one method's handler into it: for unary calls
// handled in this process without the gRPC server (inproc.UnaryMethod),
// authorized, counted, logged and traced as the server's calls are. The
// bound handler calls the first interceptor with the second one's bound
// handler, and so on, the last with handler: the closures linking them
// are made when binding, once per method, not per call. Calling it with
// the Registerer of ServerOptions reuses its metric collectors.
func UnaryServerChain(opts Options) (func(*grpc.UnaryServerInfo, grpc.UnaryHandler) grpc.UnaryHandler, error) {
	unary, _, err := handledChains(opts)
	if err != nil {
		return nil, err
	}
	return func(info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) grpc.UnaryHandler {
		for i := len(unary) - 1; i >= 0; i-- {
			intercept, next := unary[i], handler
			handler = func(ctx context.Context, req any) (any, error) {
				return intercept(ctx, req, info, next)
			}
		}
		return handler
	}, nil
}

// chainStream calls chain[0], which calls chain[1] as its handler, and so
// on; the last calls handler.
func chainStream(chain []grpc.StreamServerInterceptor, srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if len(chain) == 0 {
		return handler(srv, ss)
	}
	return chain[0](srv, ss, info, func(srv any, ss grpc.ServerStream) error {
		return chainStream(chain[1:], srv, ss, info, handler)
	})
}

// New returns a gRPC server built with ServerOptions(opts) and the gRPC
// health service registered on it, with the overall status ("") SERVING.
// The caller registers its services, then calls Serve; on shutdown it
// should call health.Shutdown before GracefulStop.
func New(opts Options) (*grpc.Server, *health.Server, error) {
	so, err := ServerOptions(opts)
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer(so...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	return srv, hs, nil
}
