// Package command is the admission binary: its flags and run loop.
package command

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/services/admission/app"
)

// Run parses args and serves until ctx is done or SIGINT/SIGTERM. Usage
// and logs go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	var (
		cfg   app.Config
		store daemon.StoreFlags
		gc    daemon.GCPercent
	)
	return daemon.Command{
		Name: "admission", Listen: ports.Admission, MetricsListen: ports.AdmissionMetrics,
		Flags: func(fs *flag.FlagSet) {
			store.Register(fs, identity.AdmissionOrganization)
			fs.StringVar(&cfg.EncryptionProviderConfig, "encryption-provider-config", "", "file with the apiserver.config.k8s.io/v1 EncryptionConfiguration the gateways are given, to read param objects encrypted at rest")
			fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", app.DefaultMaxRequestBytes, "largest AdmitRequest accepted")
			gc.Register(fs, DefaultGCPercent, os.Getenv("GOGC"))
		},
		Check: func(*daemon.Flags) error {
			if err := gc.Check(); err != nil {
				return err
			}
			cfg.StoreAddress = store.Address
			return cfg.Validate()
		},
		Build: func(ctx context.Context, env daemon.Env) (daemon.Server, error) {
			gc.Apply()
			cfg.TLS, cfg.Registerer, cfg.Logger, cfg.Trust, cfg.Callers, cfg.TracerProvider = env.TLS, env.Registry, env.Logger, env.Trust, env.Callers, env.TracerProvider
			storeTLS, err := store.TLS(env.Logger)
			if err != nil {
				return nil, err
			}
			cfg.StoreTLS = storeTLS
			return app.New(ctx, cfg)
		},
	}.Run(ctx, args, stderr)
}

// DefaultGCPercent is the admission binary's GC target (--gc-percent)
// when GOGC is not set. Its live heap is the compiled policies (about
// 0.2 MiB each) and the objects it follows, and every Admit allocates the
// request's CEL input and each policy's evaluation state, so with Go's
// default of 100 the collector runs many times a second under load; 400
// collects a quarter as often for a heap of about five times the live
// one (docs/benchmarks.md, "Admission: GC target 400").
const DefaultGCPercent = 400
