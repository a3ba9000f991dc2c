// Package command is the admission binary: its flags and run loop.
package command

import (
	"context"
	"flag"
	"io"

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
	)
	return daemon.Command{
		Name: "admission", Listen: ports.Admission, MetricsListen: ports.AdmissionMetrics,
		Flags: func(fs *flag.FlagSet) {
			store.Register(fs, identity.AdmissionOrganization)
			fs.StringVar(&cfg.EncryptionProviderConfig, "encryption-provider-config", "", "file with the apiserver.config.k8s.io/v1 EncryptionConfiguration the gateways are given, to read param objects encrypted at rest")
			fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", app.DefaultMaxRequestBytes, "largest AdmitRequest accepted")
		},
		Check: func(*daemon.Flags) error {
			cfg.StoreAddress = store.Address
			return cfg.Validate()
		},
		Build: func(ctx context.Context, env daemon.Env) (daemon.Server, error) {
			cfg.TLS, cfg.Registerer, cfg.Logger, cfg.Trust, cfg.Callers = env.TLS, env.Registry, env.Logger, env.Trust, env.Callers
			storeTLS, err := store.TLS(env.Logger)
			if err != nil {
				return nil, err
			}
			cfg.StoreTLS = storeTLS
			return app.New(ctx, cfg)
		},
	}.Run(ctx, args, stderr)
}
