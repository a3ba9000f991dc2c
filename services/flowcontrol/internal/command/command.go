// Package command is the flowcontrol binary: its flags and run loop.
package command

import (
	"context"
	"flag"
	"io"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/services/flowcontrol/app"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/apf"
)

// Run parses args and serves until ctx is done or SIGINT/SIGTERM. Usage
// and logs go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg app.Config
	return daemon.Command{
		Name: "flowcontrol", Listen: ports.FlowControl, MetricsListen: ports.FlowControlMetrics,
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.ConcurrencyLimit, "concurrency-limit", apf.DefaultCatchAllSeats, "seats of priority level catch-all (rejects when full)")
			fs.IntVar(&cfg.GlobalDefaultConcurrencyLimit, "global-default-concurrency-limit", apf.DefaultGlobalDefaultSeats, "seats of priority level global-default (authenticated users)")
			fs.IntVar(&cfg.Queues, "queues", apf.DefaultQueues, "queues of global-default")
			fs.IntVar(&cfg.HandSize, "hand-size", apf.DefaultHandSize, "queues dealt to each flow by shuffle sharding")
			fs.IntVar(&cfg.QueueLengthLimit, "queue-length-limit", apf.DefaultQueueLengthLimit, "requests each queue holds")
			fs.DurationVar(&cfg.MaxWait, "max-wait", apf.DefaultMaxWait, "longest a request waits in its queue before it is rejected")
			fs.DurationVar(&cfg.GrantLease, "grant-lease", apf.DefaultLease, "how long a gateway's grants outlive its last heartbeat")
			fs.DurationVar(&cfg.RetryAfter, "retry-after", apf.DefaultRetryAfter, "retry delay sent to rejected clients")
		},
		Check: func(*daemon.Flags) error { return cfg.Validate() },
		Build: func(ctx context.Context, env daemon.Env) (daemon.Server, error) {
			cfg.TLS, cfg.Registerer, cfg.Logger, cfg.Trust, cfg.Callers = env.TLS, env.Registry, env.Logger, env.Trust, env.Callers
			return app.New(ctx, cfg)
		},
	}.Run(ctx, args, stderr)
}
