// Package command is the watchfanout binary: its flags and run loop.
package command

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/telemetry"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// storeFlags configure the connection to the store.
type storeFlags struct {
	address, caFile, certFile, keyFile string
}

// tls loads the store client TLS configuration; nil (plaintext) when no
// file is set. The client certificate is read again when it changes, and
// log logs those reloads.
func (s *storeFlags) tls(log *slog.Logger) (*tls.Config, error) {
	if s.caFile == "" && s.certFile == "" && s.keyFile == "" {
		return nil, nil
	}
	if (s.certFile == "") != (s.keyFile == "") {
		return nil, errors.New("--store-cert-file and --store-key-file must be set together")
	}
	c, err := pki.LoadClientTLS(s.certFile, s.keyFile, s.caFile, "", log)
	if err != nil {
		return nil, fmt.Errorf("store TLS: %w", err)
	}
	return c, nil
}

// Run parses args and serves until ctx is done or SIGINT/SIGTERM. Usage
// and logs go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("watchfanout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var common daemon.Flags
	common.Register(fs, ":7004", ":9094")
	var store storeFlags
	fs.StringVar(&store.address, "store-address", storeclient.DefaultAddress, "gRPC address of the store (host:port or a gRPC target URI), or several members' addresses separated by commas (the watch follows leader changes)")
	fs.StringVar(&store.caFile, "store-ca-file", "", "CA bundle (PEM) to verify the store's serving certificate")
	fs.StringVar(&store.certFile, "store-cert-file", "", "client certificate (PEM) for mTLS to the store, with O=meridian:watchfanout (the store lets that identity read and watch), read again within 5s when it or the key changes")
	fs.StringVar(&store.keyFile, "store-key-file", "", "client certificate's private key (PEM)")
	// Tuning; zero keeps app.Config's documented default.
	var tune app.Config
	fs.DurationVar(&tune.HistoryWindow, "history-window", 0, "how long events stay in each resource's history (watches from older resourceVersions get 410); 0: 5m")
	fs.IntVar(&tune.HistoryMaxEvents, "history-max-events", 0, "cap on each resource's history; 0: 10000")
	fs.IntVar(&tune.WatcherBuffer, "watcher-buffer", 0, "events that may wait for one watcher before it is cut off; 0: 1000")
	fs.DurationVar(&tune.BookmarkInterval, "bookmark-interval", 0, "period of bookmarks to watchers that allow them; 0: 1m")
	fs.Int64Var(&tune.StartupReplay, "startup-replay", 0, "revisions of store history replayed on start, so clients of a restarted replica can resume; 0: 10000")
	fs.DurationVar(&tune.WatchTimeout, "watch-timeout", 0, "ends watches that asked for no timeout; 0: 30m")
	fs.DurationVar(&tune.ReadWaitTimeout, "read-wait-timeout", 0, "how long a read waits for the cache to reach a resourceVersion before a 504; 0: 3s")
	pprof := fs.Bool("pprof", false, "serve net/http/pprof under /debug/pprof/ on --metrics-listen")
	memLimit := fs.String("memory-limit", "", "soft memory limit of the Go runtime, a quantity such as 96Mi (see runtime/debug.SetMemoryLimit): near it the garbage collector runs more often instead of letting the heap double; empty: none (GOMEMLIMIT, if set, applies)")
	if err := daemon.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *pprof && common.MetricsListen == "" {
		return errors.New("watchfanout: --pprof needs --metrics-listen")
	}
	limit, err := memoryLimit(*memLimit)
	if err != nil {
		return fmt.Errorf("watchfanout: %w", err)
	}
	cfg := tune
	cfg.StoreAddress = store.address
	if err := cfg.Validate(); err != nil {
		return err
	}
	// With --pprof the metrics listener serves the profiles too: this
	// command serves it instead of the daemon.
	metricsListen := common.MetricsListen
	if *pprof {
		common.MetricsListen = ""
	}
	return daemon.Run(ctx, "watchfanout", &common, stderr, func(ctx context.Context, env daemon.Env) (daemon.Server, error) {
		cfg.TLS, cfg.Registerer, cfg.Logger, cfg.Trust, cfg.Callers = env.TLS, env.Registry, env.Logger, env.Trust, env.Callers
		storeTLS, err := store.tls(env.Logger)
		if err != nil {
			return nil, err
		}
		cfg.StoreTLS = storeTLS
		if limit > 0 {
			// Process-wide, so set by the binary, never by app (the
			// all-in-one embeds it).
			debug.SetMemoryLimit(limit)
			env.Logger.Info("soft memory limit set", "bytes", limit)
		}
		a, err := app.New(ctx, cfg)
		if err != nil || !*pprof {
			return a, err
		}
		addr, err := telemetry.ServeMetricsAndProfiles(ctx, metricsListen, env.Registry, env.Logger)
		if err != nil {
			a.Close()
			return nil, err
		}
		env.Logger.Info("metrics and pprof serving", "addr", addr.String())
		return a, nil
	})
}

// memoryLimit parses --memory-limit: 0 for none.
func memoryLimit(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("--memory-limit %q: %w", s, err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return 0, fmt.Errorf("--memory-limit %q: want a positive number of bytes, such as 96Mi", s)
	}
	return n, nil
}
