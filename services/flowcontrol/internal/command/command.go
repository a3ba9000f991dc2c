// Package command is the flowcontrol binary: its flags and run loop.
package command

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/services/flowcontrol/app"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/leaderelect"
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
		Name: "flowcontrol", Listen: ports.FlowControl, MetricsListen: ports.FlowControlMetrics,
		Flags: func(fs *flag.FlagSet) {
			store.Register(fs, identity.FlowControlOrganization)
			fs.StringVar(&cfg.EncryptionProviderConfig, "encryption-provider-config", "", "file with the apiserver.config.k8s.io/v1 EncryptionConfiguration the gateways are given, to read FlowSchemas and PriorityLevelConfigurations encrypted at rest")
			fs.IntVar(&cfg.ConcurrencyLimit, "concurrency-limit", apf.DefaultServerConcurrencyLimit, "server concurrency limit (seats) of the whole fleet, shared by the limited priority levels by their nominal concurrency shares")
			fs.DurationVar(&cfg.MaxWait, "max-wait", apf.DefaultMaxWait, "longest a request waits in its queue before it is rejected")
			fs.DurationVar(&cfg.GrantLease, "grant-lease", apf.DefaultLease, "how long a gateway's grants outlive its last heartbeat")
			fs.DurationVar(&cfg.RetryAfter, "retry-after", apf.DefaultRetryAfter, "retry delay sent to rejected clients")
			fs.BoolVar(&cfg.LeaderElect, "leader-elect", false, "run as one of several replicas: the one holding the Lease kube-system/meridian-flowcontrol in the store serves seats, the others send the gateways to it (needs --store-address and --advertise-address)")
			fs.StringVar(&cfg.Identity, "advertise-address", "", "this replica's address as the gateways list it in --flowcontrol-address (host:port): its holderIdentity in the Lease")
			fs.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", leaderelect.DefaultLeaseDuration, "how long followers wait after the leader's last renewal before taking the Lease")
			fs.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", leaderelect.DefaultRenewDeadline, "how long the leader retries renewing before it stops leading")
			fs.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", leaderelect.DefaultRetryPeriod, "how often the Lease is renewed, and tried by followers")
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

// DefaultGCPercent is the flowcontrol binary's GC target (--gc-percent)
// when GOGC is not set. The service's live heap is small (a few MB: the
// configuration, the queues, the grants held), and every decision
// allocates its request's and answer's messages, so with Go's default of
// 100 the collector runs many times a second under load; 400 collects a
// quarter as often for a heap of about five times the live one
// (docs/benchmarks.md, "w/fc21a").
const DefaultGCPercent = 400
