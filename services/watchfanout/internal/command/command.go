// Package command is the watchfanout binary: its flags and run loop.
package command

import (
	"context"
	"flag"
	"io"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// Run parses args and serves until ctx is done or SIGINT/SIGTERM. Usage
// and logs go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	var (
		cfg   app.Config // tuning: zero keeps app.Config's documented default
		store daemon.StoreFlags
	)
	return daemon.Command{
		Name: "watchfanout", Listen: ports.WatchFanout, MetricsListen: ports.WatchFanoutMetrics,
		Flags: func(fs *flag.FlagSet) {
			store.Register(fs, identity.WatchFanoutOrganization)
			store.RegisterLocal(fs)
			fs.StringVar(&cfg.EncryptionProviderConfig, "encryption-provider-config", "", "file with the apiserver.config.k8s.io/v1 EncryptionConfiguration the gateways are given (--encryption-provider-config): the cache decrypts the values the store holds with it")
			fs.DurationVar(&cfg.HistoryWindow, "history-window", 0, "how long events stay in each resource's history (watches from older resourceVersions get 410); 0: 5m")
			fs.IntVar(&cfg.HistoryMaxEvents, "history-max-events", 0, "cap on each resource's history; 0: 10000")
			fs.IntVar(&cfg.WatcherBuffer, "watcher-buffer", 0, "events that may wait for one watcher before it is cut off; 0: 1000")
			fs.DurationVar(&cfg.BookmarkInterval, "bookmark-interval", 0, "period of bookmarks to watchers that allow them; 0: 1m")
			fs.Int64Var(&cfg.StartupReplay, "startup-replay", 0, "revisions of store history replayed on start, so clients of a restarted replica can resume; 0: 10000")
			fs.DurationVar(&cfg.WatchTimeout, "watch-timeout", 0, "ends watches that asked for no timeout; 0: 30m")
			fs.DurationVar(&cfg.ReadWaitTimeout, "read-wait-timeout", 0, "how long a read waits for the cache to reach a resourceVersion before a 504; 0: 3s")
		},
		Check: func(*daemon.Flags) error {
			cfg.StoreAddress, cfg.StoreLocalAddress = store.Address, store.Local
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
