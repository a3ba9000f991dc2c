// Command meridian runs the whole control plane in one process: the store,
// admission, flow control, watchfanout and the API gateway, with data in
// one directory. It writes an admin kubeconfig and prints how to use
// kubectl with it.
//
// `meridian pki ...` instead creates the CAs and certificates of a
// deployment of the services as separate processes (see internal/pkicmd);
// `meridian storage-migrate ...` rewrites stored objects with the current
// encryption key (see internal/storagemigrate).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/internal/pkicmd"
	"github.com/meridian-cp/meridian/internal/storagemigrate"
	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/memtrim"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/lib/telemetry"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	"k8s.io/apimachinery/pkg/api/resource"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pki" {
		if err := pkicmd.Run(os.Args[2:], os.Stdout, os.Stderr); err != nil {
			if !errors.Is(err, pkicmd.ErrUsage) {
				fmt.Fprintln(os.Stderr, "meridian pki:", err)
			}
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "storage-migrate" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := storagemigrate.Command(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "meridian storage-migrate:", err)
			os.Exit(1)
		}
		return
	}
	daemon.Main("meridian", run)
}

// run serves the control plane until ctx is done or one of its services
// stops. Flag errors and -h exit the process, as the flag package does.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	var (
		dataDir   = flag.String("data-dir", ".meridian", "directory for the store, certificates and the admin kubeconfig")
		listen    = flag.String("listen", ports.API, "address of the HTTPS Kubernetes API")
		grpcAddr  = flag.String("grpc-listen", ports.APIGRPC, "address of the gRPC API (meridian.api.v1.ResourceService); empty: none")
		tokenFile = flag.String("token-auth-file", "", "static bearer tokens, kube-apiserver format: token,user,uid[,\"group1,group2\"]")
		authzMode = flag.String("authorization-mode", "RBAC", "RBAC (roles and bindings decide every request; system:masters may do anything) or AlwaysAllow (every authenticated request is allowed)")
		encConfig = flag.String("encryption-provider-config", "", "file with an apiserver.config.k8s.io/v1 EncryptionConfiguration, as kube-apiserver's: the resources it names are encrypted in the store")
		saIssuer  = flag.String("service-account-issuer", "", "the \"iss\" of service account tokens; empty: the API's URL (https://<listen address>)")
		saMaxExp  = flag.Duration("service-account-max-token-expiration", 0, "the longest lifetime a TokenRequest gets (longer requests are cut to it); 0: 2^32 seconds")
		logLevel  = flag.String("log-level", "info", "debug, info, warn or error")
		logFormat = flag.String("log-format", "text", "text or json")
		reqLog    = flag.String("request-log-level", "debug", "level of the one log line per API request (audit id, user, verb, resource, code, latency, flow schema): debug, info, warn or error; logged when --log-level lets it through")
		pprofAddr = flag.String("pprof", "", "serve Go's /debug/pprof on this address (e.g. 127.0.0.1:6060); empty: off")
		audit     gateway.AuditOptions
		memory    memtrim.Options
		anonymous = flag.Bool("anonymous-auth", true, "requests without credentials are system:anonymous, which RBAC lets read the health endpoints and /version only; false: 401 for every request without credentials")
		oidc      gateway.OIDCOptions
		listBytes = flag.Int64("list-bytes-in-flight", 0, "bytes of list responses in flight, over every list and caller (flow-control-exempt ones too): a list counts at least 2 MiB, waits for its share, then gets 429 with Retry-After; while lists are in flight Go's memory limit is what the process held before them plus this and a quarter; 0: 512 MiB; < 0: no bound")
		cacheSize = flag.String("store-cache-size", resource.NewQuantity(allinone.DefaultStoreCacheBytes, resource.BinarySI).String(), "size of the store's pebble block cache, a quantity such as 64Mi (a store member of its own defaults to 128Mi; the all-in-one serves most reads from watchfanout's cache)")
		apfLimit  = flag.Int("flowcontrol-concurrency-limit", 0, "API Priority and Fairness: the server concurrency limit (seats) the limited priority levels share by their nominal concurrency shares; 0: 600, kube-apiserver's --max-requests-inflight plus --max-mutating-requests-inflight")
	)
	audit.AddFlags(flag.CommandLine)
	oidc.AddFlags(flag.CommandLine)
	memory.AddFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: meridian [flags]          run the control plane in one process\n"+
			"       meridian pki <command> ...  create the CAs and certificates of a deployment (meridian pki --help)\n"+
			"       meridian storage-migrate ...  re-encrypt stored objects with the current key (meridian storage-migrate --help)\n\nflags:\n")
		flag.PrintDefaults()
	}
	_ = flag.CommandLine.Parse(args) // flag.ExitOnError: never returns an error
	logger, err := telemetry.NewLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	requestLogLevel, err := telemetry.ParseLevel(*reqLog)
	if err != nil {
		return fmt.Errorf("--request-log-level: %w", err)
	}
	storeCache, err := resource.ParseQuantity(*cacheSize)
	if err != nil {
		return fmt.Errorf("--store-cache-size: %w", err)
	}
	if storeCache.Value() <= 0 {
		return fmt.Errorf("--store-cache-size %q: not a positive size", *cacheSize)
	}
	if err := memory.Start(ctx, logger); err != nil {
		return err
	}
	if *pprofAddr != "" {
		// Profiles for benchmarks (docs/benchmarks.md); never on by default.
		mux := http.NewServeMux()
		telemetry.RegisterProfiles(mux)
		srv := &http.Server{Addr: *pprofAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.ListenAndServe() }()
		defer srv.Close()
	}

	tracing, err := telemetry.TracingFromEnv(ctx, "meridian", logger)
	if err != nil {
		return err
	}
	defer daemon.ShutdownTracing(ctx, tracing, logger)
	cp, err := allinone.Start(ctx, allinone.Config{
		TracerProvider: tracing.Provider, RequestLogLevel: requestLogLevel,
		DataDir: *dataDir, Listen: *listen, GRPCListen: *grpcAddr, TokenAuthFile: *tokenFile,
		AuthorizationMode: *authzMode, EncryptionProviderConfig: *encConfig, Audit: audit, Logger: logger,
		ServiceAccountIssuer: *saIssuer, ServiceAccountMaxTokenExpiration: *saMaxExp,
		OIDC: oidc, DisableAnonymousAuth: !*anonymous,
		FlowControl: allinone.FlowControlConfig{ConcurrencyLimit: *apfLimit}, ListBytesInFlight: *listBytes,
		MemoryPacer:     memtrim.NewPacer(),
		StoreCacheBytes: storeCache.Value(),
	})
	if err != nil {
		return err
	}
	grpcAPI := "off"
	if cp.GRPCAddr != nil {
		grpcAPI = cp.GRPCAddr.String()
	}
	logger.Info("meridian is ready",
		"api", "https://"+cp.Addr.String(),
		"grpc", grpcAPI,
		"store", cp.StoreAddr,
		"kubeconfig", cp.Kubeconfig,
		"try", "kubectl --kubeconfig "+cp.Kubeconfig+" get namespaces")
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err = <-cp.Err():
		logger.Error("a service stopped", "error", err)
	}
	if cerr := cp.Close(); err == nil {
		err = cerr
	}
	return err
}
