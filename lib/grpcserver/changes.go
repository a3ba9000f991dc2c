package grpcserver

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Changes serves the streams of a server-streaming method that sends a
// value and then each new version of it (admission's scope, flow
// control's exemptions) until the caller hangs up. Its Close ends them:
// GracefulStop waits for open streams, and these never end by themselves.
type Changes struct {
	service   string
	closing   chan struct{} // closed by Close
	closeOnce sync.Once
}

// NewChanges returns the Changes of the service named service (used in
// the message of the streams Close ends).
func NewChanges(service string) *Changes {
	return &Changes{service: service, closing: make(chan struct{})}
}

// Close ends every stream SendChanges serves with UNAVAILABLE, and makes
// new ones end so at once, so that callers move to another replica. It is
// safe to call more than once.
func (c *Changes) Close() {
	c.closeOnce.Do(func() { close(c.closing) })
}

// SendChanges sends the value current returns, then its new value each
// time the channel current returned with it is closed (a nil channel never
// is), until the call's context ends (its error as a gRPC status), a Send
// fails, or c is closed (UNAVAILABLE, "<service>: shutting down").
func SendChanges[Res any](c *Changes, stream grpc.ServerStreamingServer[Res], current func() (*Res, <-chan struct{})) error {
	ctx := stream.Context()
	for {
		select {
		case <-c.closing:
			return c.shuttingDown()
		default:
		}
		v, changed := current()
		if err := stream.Send(v); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-c.closing:
			return c.shuttingDown()
		}
	}
}

func (c *Changes) shuttingDown() error {
	return status.Error(codes.Unavailable, c.service+": shutting down")
}
