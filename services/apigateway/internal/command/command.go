// Package command is the apigateway binary: its flags and run loop.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/memtrim"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/meridian-cp/meridian/services/apigateway/app"
)

// flags are the gateway's command line.
type flags struct {
	listen, grpcListen                         string
	certFile, keyFile, clientCAFile, tokenFile string
	authorizationMode                          string
	storeAddr, admissionAddr, flowAddr         string
	storeLocalAddr                             string
	watchAddrs                                 string
	svcCert, svcKey, svcCA                     string
	encryptionConfig                           string
	sa                                         saFlags
	oidc                                       app.OIDCOptions
	anonymousAuth                              bool
	rootCAFile                                 string
	fallbackLimit                              int
	listBytes                                  int64
	shutdownDelay                              time.Duration
	audit                                      app.AuditOptions
	logLevel, logFormat                        string
	requestLogLevel                            string
	memory                                     memtrim.Options
	pprof                                      string
}

// flagSet defines the flags on a new flag set that stores them in f and
// writes usage and errors to out.
func flagSet(f *flags, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("apigateway", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.listen, "listen", ports.API, "address of the HTTPS API (the default is loopback only: give this host's address, or 0.0.0.0, to serve other hosts)")
	fs.StringVar(&f.grpcListen, "grpc-listen", ports.APIGRPC, "address of the gRPC API (meridian.api.v1.ResourceService, gRPC health); empty: none")
	fs.StringVar(&f.certFile, "tls-cert-file", "", "serving certificate of the HTTPS and gRPC APIs, signed by the API CA, read again within 5s when it or the key changes (required)")
	fs.StringVar(&f.keyFile, "tls-key-file", "", "key of the serving certificate (required)")
	fs.StringVar(&f.clientCAFile, "client-ca-file", "", "CA that signs client certificates of API users (user = CN, groups = O): the API client CA, never the internal CA")
	fs.StringVar(&f.rootCAFile, "root-ca-file", "", "CA bundle verifying the serving certificate, published in every namespace as the kube-root-ca.crt ConfigMap (read again within 5s when it changes); empty: --client-ca-file, the API CA")
	fs.StringVar(&f.tokenFile, "token-auth-file", "", "static bearer tokens, kube-apiserver format: token,user,uid[,\"group1,group2\"]")
	fs.BoolVar(&f.anonymousAuth, "anonymous-auth", true, "requests without credentials are system:anonymous (group system:unauthenticated), which RBAC lets read the health endpoints and /version only (under AlwaysAllow: those only, 401 elsewhere); false: 401 for every request without credentials")
	f.oidc.AddFlags(fs)
	fs.StringVar(&f.authorizationMode, "authorization-mode", app.AuthorizationRBAC, "RBAC (roles and bindings decide every request; system:masters may do anything) or AlwaysAllow (every authenticated request is allowed)")
	fs.StringVar(&f.storeAddr, "store-address", ports.Store, "comma-separated gRPC addresses of the store's members (host:port): give every member, so that calls move to another member when one goes away (writes reach the leader from any member)")
	fs.StringVar(&f.storeLocalAddr, "store-local-address", "", daemon.LocalUsage)
	fs.StringVar(&f.admissionAddr, "admission-address", ports.Admission, "gRPC address of the admission service; empty: no admission service (every write is admitted)")
	fs.StringVar(&f.flowAddr, "flowcontrol-address", ports.FlowControl, "gRPC address of the flow-control service, or comma-separated the addresses of its replicas (host:port, as each replica's --advertise-address), of which the leader takes the calls; empty: no flow control")
	fs.Int64Var(&f.listBytes, "list-bytes-in-flight", 0, "bytes of list responses in flight, over every list and caller (flow-control-exempt ones too): a list counts at least 2 MiB, waits for its share, then gets 429 with Retry-After; while lists are in flight Go's memory limit is what the process held before them plus this and a quarter; 0: 512 MiB; < 0: no bound")
	fs.IntVar(&f.fallbackLimit, "flowcontrol-fallback-concurrency-limit", 0, "seats of this gateway's own limiter, used with the stored FlowSchemas and PriorityLevelConfigurations while the flow-control service does not answer: its share of the service's --concurrency-limit; 0: 600")
	fs.StringVar(&f.watchAddrs, "watchfanout-addresses", ports.WatchFanout, "comma-separated gRPC addresses of watchfanout replicas; empty: watches and cached reads from the store")
	fs.StringVar(&f.svcCert, "service-cert-file", "", "client certificate for mTLS to the other services (O=meridian:gateways, internal CA), read again within 5s when it or the key changes")
	fs.StringVar(&f.svcKey, "service-key-file", "", "key of the service client certificate")
	fs.StringVar(&f.svcCA, "service-ca-file", "", "CA of the other services' serving certificates, the internal CA (empty: plaintext, development only)")
	fs.StringVar(&f.encryptionConfig, "encryption-provider-config", "", "file with an apiserver.config.k8s.io/v1 EncryptionConfiguration, as kube-apiserver's: the resources it names are encrypted before they reach the store; watchfanout must be given the same file")
	f.sa.define(fs)
	fs.DurationVar(&f.shutdownDelay, "shutdown-delay-duration", 0, "on SIGTERM, how long to keep serving with /readyz failing before the listeners close, so that load balancers stop sending requests (set it above their probe period times failure threshold)")
	f.audit.AddFlags(fs)
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.requestLogLevel, "request-log-level", "debug", "level of the one log line per API request (audit id, user, verb, resource, code, latency, flow schema): debug, info, warn or error; logged when --log-level lets it through")
	fs.StringVar(&f.logFormat, "log-format", "json", "json or text")
	f.memory.AddFlags(fs)
	fs.StringVar(&f.pprof, "pprof", "", "serve Go's /debug/pprof on this address (e.g. 127.0.0.1:6060), plain HTTP without authentication, for benchmarks; empty: off")
	return fs
}

// check reports every problem with the parsed flags.
func (f *flags) check() error {
	var errs []error
	if f.certFile == "" || f.keyFile == "" {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file are required"))
	}
	if f.clientCAFile == "" && f.tokenFile == "" && !f.oidc.Enabled() {
		errs = append(errs, errors.New("no authentication: set --client-ca-file, --token-auth-file and/or --oidc-issuer-url"))
	}
	if err := f.oidc.Validate(); err != nil {
		errs = append(errs, err)
	}
	if f.listen == "" {
		errs = append(errs, errors.New("--listen is required"))
	}
	if f.storeAddr == "" {
		errs = append(errs, errors.New("--store-address is required"))
	}
	if (f.svcCert == "") != (f.svcKey == "") {
		errs = append(errs, errors.New("--service-cert-file and --service-key-file must be set together"))
	}
	if f.svcCert != "" && f.svcCA == "" {
		errs = append(errs, errors.New("--service-cert-file needs --service-ca-file (without it the services are dialed in plaintext)"))
	}
	return errors.Join(errs...)
}

// Run parses args and serves the gateway until ctx is done,
// SIGINT/SIGTERM arrives or a listener fails. Usage and logs go to
// stderr; -h prints the usage and returns nil.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	var f flags
	if err := daemon.ParseFlags(flagSet(&f, stderr), args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger, err := telemetry.NewLogger(stderr, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	requestLogLevel, err := telemetry.ParseLevel(f.requestLogLevel)
	if err != nil {
		return fmt.Errorf("--request-log-level: %w", err)
	}
	if err := f.memory.Start(ctx, logger); err != nil {
		return err
	}
	if f.pprof != "" {
		// Profiles for benchmarks (docs/benchmarks.md); never on by default.
		plis, err := daemon.Listen(ctx, "pprof", f.pprof)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		telemetry.RegisterProfiles(mux)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(plis) }()
		defer srv.Close()
	}

	serving, err := pki.LoadServerTLS(f.certFile, f.keyFile, "", logger)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	cfg := app.Config{
		StoreAddress: f.storeAddr, StoreLocalAddress: f.storeLocalAddr, AdmissionAddress: f.admissionAddr, FlowControlAddress: f.flowAddr, FlowControlFallbackLimit: f.fallbackLimit,
		ServingTLS: serving, TokenAuthFile: f.tokenFile, AuthorizationMode: f.authorizationMode, Logger: logger, ShutdownDelay: f.shutdownDelay,
		ListBytesInFlight:        f.listBytes,
		MemoryPacer:              memtrim.NewPacer(),
		EncryptionProviderConfig: f.encryptionConfig, Audit: f.audit, ServiceAccounts: f.sa.config(),
		OIDC: f.oidc, DisableAnonymousAuth: !f.anonymousAuth,
		RootCAFile: f.rootCAFile, RequestLogLevel: requestLogLevel,
	}
	if cfg.RootCAFile == "" {
		// meridian's API CA signs both the serving certificate and the
		// users' client certificates (docs/distributed.md).
		cfg.RootCAFile = f.clientCAFile
	}
	if f.clientCAFile != "" {
		if cfg.ClientCAs, err = pki.LoadPool(f.clientCAFile); err != nil {
			return err
		}
	}
	if f.svcCA != "" {
		if cfg.ClientTLS, err = pki.LoadClientTLS(f.svcCert, f.svcKey, f.svcCA, "", logger); err != nil {
			return fmt.Errorf("service client certificate: %w", err)
		}
	}
	for _, a := range strings.Split(f.watchAddrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.WatchFanoutAddresses = append(cfg.WatchFanoutAddresses, a)
		}
	}
	reg := telemetry.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	tracing, err := telemetry.TracingFromEnv(ctx, "apigateway", logger)
	if err != nil {
		return err
	}
	defer daemon.ShutdownTracing(ctx, tracing, logger)
	cfg.TracerProvider = tracing.Provider

	// Listen before connecting to anything, so that an address in use
	// fails the start at once, naming the flag.
	lis, err := daemon.Listen(ctx, "listen", f.listen)
	if err != nil {
		return err
	}
	var glis net.Listener
	if f.grpcListen != "" {
		if glis, err = daemon.Listen(ctx, "grpc-listen", f.grpcListen); err != nil {
			lis.Close()
			return err
		}
	}
	a, err := app.New(ctx, cfg)
	if err != nil {
		lis.Close()
		if glis != nil {
			glis.Close()
		}
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- a.Serve(lis) }()
	logger.Info("apigateway serving", "address", lis.Addr().String())
	if glis != nil {
		go func() { errc <- a.ServeGRPC(glis) }()
		logger.Info("apigateway gRPC API serving", "address", glis.Addr().String())
	}
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err = <-errc:
	}
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	return err
}
