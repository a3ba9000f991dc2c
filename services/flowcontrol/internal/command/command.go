// Package command is the flowcontrol binary: its flags and run loop.
package command

import (
	"context"
	"flag"
	"io"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/services/flowcontrol/app"
)

// Run parses args and serves until ctx is done or SIGINT/SIGTERM. Usage
// and logs go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	var (
		cfg   app.Config
		store daemon.StoreFlags
	)
	return daemon.Command{
		Name: "flowcontrol", Listen: ports.FlowControl, MetricsListen: ports.FlowControlMetrics,
		Flags: func(fs *flag.FlagSet) {
			store.Register(fs, identity.FlowControlOrganization)
			fs.StringVar(&cfg.EncryptionProviderConfig, "encryption-provider-config", "", "file with the apiserver.config.k8s.io/v1 EncryptionConfiguration the gateways are given, to read FlowSchemas and PriorityLevelConfigurations encrypted at rest")
			fs.IntVar(&cfg.ConcurrencyLimit, "concurrency-limit", apf.DefaultServerConcurrencyLimit, "server concurrency limit (seats) of the whole fleet, shared by the limited priority levels by their nominal concurrency shares")
			fs.DurationVar(&cfg.MaxWait, "max-wait", apf.DefaultMaxWait, "longest a request waits in its queue before it is rejected")
			fs.DurationVar(&cfg.GrantLease, "grant-lease", apf.DefaultLease, "how long a gateway's grants outlive its last heartbeat")
			fs.DurationVar(&cfg.RetryAfter, "retry-after", apf.DefaultRetryAfter, "retry delay sent to rejected clients")
		},
		Check: func(*daemon.Flags) error {
			cfg.StoreAddress = store.Address
			return cfg.Validate()
		},
		Build: func(ctx context.Context, env daemon.Env) (daemon.Server, error) {
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
