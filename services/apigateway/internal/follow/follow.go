// Package follow keeps a server stream of another service open for as long
// as a context lives, reopening it with backoff after it breaks. The
// gateway follows the admission service's scope and the flow-control
// service's exemptions this way; between streams it holds neither, and
// asks the service about every request instead.
package follow

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of Config.
const (
	DefaultMinRetry           = 100 * time.Millisecond
	DefaultMaxRetry           = 5 * time.Second
	DefaultUnimplementedRetry = time.Minute
)

// Config configures Run.
type Config struct {
	// What names the stream in logs, e.g. "admission scope". Required.
	What string
	// Open opens one stream, applies every message it receives, and
	// returns when the stream ends: established reports whether a message
	// arrived, err why it ended. Required.
	Open func(ctx context.Context) (established bool, err error)
	// Lost is called after every stream ends, before the next attempt: the
	// follower must stop relying on what the stream told it. Required.
	Lost func()
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// MinRetry and MaxRetry bound the exponential backoff between failed
	// attempts; 0 means DefaultMinRetry (100ms) and DefaultMaxRetry (5s).
	// After a stream that was established, the next attempt waits
	// MinRetry.
	MinRetry, MaxRetry time.Duration
	// UnimplementedRetry is how long a service that answers UNIMPLEMENTED
	// (a version older than the stream) is left before it is asked again,
	// say after an upgrade; 0 means DefaultUnimplementedRetry (1m).
	UnimplementedRetry time.Duration
}

// Run follows the stream until ctx ends. Call it on its own goroutine.
func Run(ctx context.Context, cfg Config) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	minRetry := cmp.Or(cfg.MinRetry, DefaultMinRetry)
	maxRetry := cmp.Or(cfg.MaxRetry, DefaultMaxRetry)
	unimplemented := cmp.Or(cfg.UnimplementedRetry, DefaultUnimplementedRetry)
	backoff := minRetry
	for {
		established, err := cfg.Open(ctx)
		cfg.Lost()
		if ctx.Err() != nil {
			return
		}
		wait := backoff
		switch {
		case status.Code(err) == codes.Unimplemented:
			log.Info("the service does not send its "+cfg.What+" (an older version); asking it about every request", "retry", unimplemented)
			wait = unimplemented
		case established:
			log.Info(cfg.What+" stream ended; asking the service about every request until it is back", "error", err)
			wait, backoff = minRetry, minRetry
		default:
			log.Warn(cfg.What+" stream failed; asking the service about every request until it is back", "error", err, "retry", wait)
			backoff = min(2*backoff, maxRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Receive is the body of a Config.Open: it opens one stream with open and
// calls apply with every message it receives (first is true for the first
// one) until the stream ends. It returns whether a message arrived and
// why the stream ended; the stream's context is cancelled on return.
func Receive[M any](ctx context.Context, open func(context.Context) (grpc.ServerStreamingClient[M], error), apply func(msg *M, first bool)) (established bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := open(ctx)
	if err != nil {
		return false, err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return established, err
		}
		apply(msg, !established)
		established = true
	}
}
