// Package command is the admission binary: its flags and run loop.
package command

import (
	"context"
	"flag"
	"io"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/services/admission/app"
)

// Run parses args and serves until ctx is done or SIGINT/SIGTERM. Usage
// and logs go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg app.Config
	return daemon.Command{
		Name: "admission", Listen: ports.Admission, MetricsListen: ports.AdmissionMetrics,
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", app.DefaultMaxRequestBytes, "largest AdmitRequest accepted")
		},
		Check: func(*daemon.Flags) error { return cfg.Validate() },
		Build: func(ctx context.Context, env daemon.Env) (daemon.Server, error) {
			cfg.TLS, cfg.Registerer, cfg.Logger, cfg.Trust, cfg.Callers, cfg.TracerProvider = env.TLS, env.Registry, env.Logger, env.Trust, env.Callers, env.TracerProvider
			return app.New(ctx, cfg)
		},
	}.Run(ctx, args, stderr)
}
