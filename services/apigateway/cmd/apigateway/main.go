// Command apigateway serves the Kubernetes REST API (and meridian's gRPC
// ResourceService behind it) in front of the store, admission and
// flow-control services.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/meridian-cp/meridian/services/apigateway/app"
)

func main() { daemon.Main("apigateway", run) }

// run serves the gateway until ctx is done or a listener fails. Flag
// errors and -h exit the process, as the flag package does.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	var (
		listen        = flag.String("listen", "127.0.0.1:6443", "address of the HTTPS API")
		grpcListen    = flag.String("grpc-listen", "127.0.0.1:6444", "address of the gRPC API (meridian.api.v1.ResourceService, gRPC health); empty: none")
		certFile      = flag.String("tls-cert-file", "", "serving certificate of the HTTPS and gRPC APIs, signed by the API CA, read again within 5s when it or the key changes (required)")
		keyFile       = flag.String("tls-key-file", "", "key of the serving certificate (required)")
		clientCAFile  = flag.String("client-ca-file", "", "CA that signs client certificates of API users (user = CN, groups = O): the API client CA, never the internal CA")
		tokenFile     = flag.String("token-auth-file", "", "static bearer tokens, kube-apiserver format: token,user,uid[,\"group1,group2\"]")
		storeAddr     = flag.String("store-address", "127.0.0.1:2479", "gRPC address of the store")
		admissionAddr = flag.String("admission-address", "", "gRPC address of the admission service (empty: no admission)")
		flowAddr      = flag.String("flowcontrol-address", "", "gRPC address of the flow-control service (empty: no flow control)")
		watchAddrs    = flag.String("watchfanout-addresses", "", "comma-separated gRPC addresses of watchfanout replicas (empty: watches and cached reads from the store)")
		svcCert       = flag.String("service-cert-file", "", "client certificate for mTLS to the other services (O=meridian:gateways, internal CA), read again within 5s when it or the key changes")
		svcKey        = flag.String("service-key-file", "", "key of the service client certificate")
		svcCA         = flag.String("service-ca-file", "", "CA of the other services' serving certificates, the internal CA (empty: plaintext, tests only)")
		shutdownDelay = flag.Duration("shutdown-delay-duration", 0, "on SIGTERM, how long to keep serving with /readyz failing before the listeners close, so that load balancers stop sending requests (set it above their probe period times failure threshold)")
		logLevel      = flag.String("log-level", "info", "debug, info, warn or error")
		logFormat     = flag.String("log-format", "json", "json or text")
	)
	_ = flag.CommandLine.Parse(args) // flag.ExitOnError: never returns an error
	logger, err := telemetry.NewLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}

	serving, err := pki.LoadServerTLS(*certFile, *keyFile, "", logger)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	cfg := app.Config{
		StoreAddress: *storeAddr, AdmissionAddress: *admissionAddr, FlowControlAddress: *flowAddr,
		ServingTLS: serving, TokenAuthFile: *tokenFile, Logger: logger, ShutdownDelay: *shutdownDelay,
	}
	if *clientCAFile != "" {
		if cfg.ClientCAs, err = pki.LoadPool(*clientCAFile); err != nil {
			return err
		}
	}
	if *svcCA != "" {
		if cfg.ClientTLS, err = pki.LoadClientTLS(*svcCert, *svcKey, *svcCA, "", logger); err != nil {
			return fmt.Errorf("service client certificate: %w", err)
		}
	}
	for _, a := range strings.Split(*watchAddrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.WatchFanoutAddresses = append(cfg.WatchFanoutAddresses, a)
		}
	}
	reg := telemetry.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg

	a, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = a.Close()
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- a.Serve(lis) }()
	logger.Info("apigateway serving", "address", lis.Addr().String())
	if *grpcListen != "" {
		glis, err := net.Listen("tcp", *grpcListen)
		if err != nil {
			_ = a.Close()
			return err
		}
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
