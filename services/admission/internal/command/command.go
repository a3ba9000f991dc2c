// Package command is the admission binary: its flags and run loop.
package command

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/services/admission/app"
)

// Run parses args and serves until ctx is done or SIGINT/SIGTERM. Usage
// and logs go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("admission", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var common daemon.Flags
	common.Register(fs, ":7002", ":9092")
	var cfg app.Config
	fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", app.DefaultMaxRequestBytes, "largest AdmitRequest accepted")
	if err := daemon.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	return daemon.Run(ctx, "admission", &common, stderr, func(ctx context.Context, env daemon.Env) (daemon.Server, error) {
		cfg.TLS, cfg.Registerer, cfg.Logger, cfg.Trust, cfg.Callers = env.TLS, env.Registry, env.Logger, env.Trust, env.Callers
		return app.New(ctx, cfg)
	})
}
