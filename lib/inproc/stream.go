package inproc

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Stream runs a server-streaming handler of this process without a
// connection and without a server: handler runs on req in a new goroutine,
// and the caller gets the client end of its stream, whose Recv returns
// the very messages the handler sends, with no encoding, no transport and
// no flow-control window in between. The gateway's REST front end reaches
// the ResourceService's streaming methods (watch, streamed lists) through
// grpc-gateway's client routes this way, so that no watch event or list
// page is marshalled to protobuf, framed and parsed back once per watcher.
//
// The handler's context is ctx with ctx's outgoing metadata as its
// incoming metadata, and grpc.SetHeader and friends work on it as on a
// real server. Cancelling ctx ends the stream; the handler's context ends
// when it returns, as a gRPC server's does.
//
// Invariant (Stream and ServerStream): Send returns only once the
// receiver is done with the message (it has called Recv again, or gone
// away), as a real stream's Send returns only once the message is
// encoded. A handler may therefore reuse what it sent, and a slow
// receiver slows its handler down instead of letting messages pile up.
func Stream[Req, Resp any](ctx context.Context, method string, req *Req, handler func(*Req, grpc.ServerStreamingServer[Resp]) error) grpc.ServerStreamingClient[Resp] {
	md, _ := metadata.FromOutgoingContext(ctx)
	return startStream[Resp](ctx, metadata.NewIncomingContext(ctx, md.Copy()), method, func(ss grpc.ServerStream) error {
		return handler(req, &grpc.GenericServerStream[Req, Resp]{ServerStream: ss})
	})
}

// ServerStream runs a server-streaming method of a gRPC server of this
// process as Stream does, inside intercept (the server's interceptor
// chain, grpcserver.StreamServerInterceptor), as a call over a
// connection dialed with DialOptions(cert) would: the handler's context
// has a peer carrying an AuthInfo holding cert, so the interceptors
// authorize the call as one made over an in-memory connection, and the
// caller's trace context when ctx is traced (telemetry.Traced).
func ServerStream[Req, Resp any](ctx context.Context, cert *x509.Certificate, info *grpc.StreamServerInfo, intercept grpc.StreamServerInterceptor, srv any, req *Req, handler func(*Req, grpc.ServerStreamingServer[Resp]) error) grpc.ServerStreamingClient[Resp] {
	sctx := serverContext(ctx, newPeer(cert, info.FullMethod))
	return startStream[Resp](ctx, sctx, info.FullMethod, func(ss grpc.ServerStream) error {
		return intercept(srv, ss, info, func(_ any, ss grpc.ServerStream) error {
			return handler(req, &grpc.GenericServerStream[Req, Resp]{ServerStream: ss})
		})
	})
}

// startStream runs run in a new goroutine on the server end of a new
// pipe, under a context derived from serverCtx that ends when run
// returns, and returns the client end, which lives in clientCtx.
func startStream[Resp any](clientCtx, serverCtx context.Context, method string, run func(grpc.ServerStream) error) grpc.ServerStreamingClient[Resp] {
	p := &streamPipe[Resp]{
		clientCtx: clientCtx,
		msgs:      make(chan *Resp),
		ack:       make(chan struct{}, 1),
		headerOut: make(chan struct{}),
		done:      make(chan struct{}),
		method:    method,
	}
	sctx, cancel := context.WithCancel(serverCtx)
	p.serverCtx = grpc.NewContextWithServerTransportStream(sctx, streamTransport[Resp]{p})
	go func() {
		defer cancel() // as a gRPC server ends a call's context when its handler returns
		err := run(streamServer[Resp]{p})
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		_ = p.sendHeader(nil)
		close(p.done)
	}()
	return streamClient[Resp]{p}
}

// streamPipe is one stream. Messages go through msgs one at a time; ack
// tells the sender the receiver is done with the last one.
type streamPipe[Resp any] struct {
	clientCtx, serverCtx context.Context
	method               string

	msgs chan *Resp
	ack  chan struct{}
	// headerOut is closed once the header is final (first message,
	// SendHeader, or the handler's return); done once the handler returned.
	headerOut, done chan struct{}

	mu         sync.Mutex
	header     metadata.MD
	headerSent bool
	trailer    metadata.MD
	err        error

	// holding is true while the receiver has a message it has not
	// acknowledged; only the receiver's goroutine touches it.
	holding bool
}

func (p *streamPipe[Resp]) sendHeader(md metadata.MD) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.headerSent {
		if md != nil {
			return errors.New("inproc: header already sent")
		}
		return nil
	}
	p.header = metadata.Join(p.header, md)
	p.headerSent = true
	close(p.headerOut)
	return nil
}

func (p *streamPipe[Resp]) setHeader(md metadata.MD) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.headerSent {
		return errors.New("inproc: header already sent")
	}
	p.header = metadata.Join(p.header, md)
	return nil
}

func (p *streamPipe[Resp]) setTrailer(md metadata.MD) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trailer = metadata.Join(p.trailer, md)
}

// streamServer is the handler's end, below the interceptors.
type streamServer[Resp any] struct{ p *streamPipe[Resp] }

// SendMsg hands m to the receiver and waits until it is done with it.
func (s streamServer[Resp]) SendMsg(m any) error {
	r, ok := m.(*Resp)
	if !ok {
		return errors.New("inproc: SendMsg of the wrong type")
	}
	p := s.p
	if err := p.sendHeader(nil); err != nil {
		return err
	}
	select {
	case p.msgs <- r:
	case <-p.serverCtx.Done():
		return p.serverCtx.Err()
	}
	select {
	case <-p.ack:
		return nil
	case <-p.serverCtx.Done():
		return p.serverCtx.Err()
	}
}

func (s streamServer[Resp]) SetHeader(md metadata.MD) error  { return s.p.setHeader(md) }
func (s streamServer[Resp]) SendHeader(md metadata.MD) error { return s.p.sendHeader(md) }
func (s streamServer[Resp]) SetTrailer(md metadata.MD)       { s.p.setTrailer(md) }
func (s streamServer[Resp]) Context() context.Context        { return s.p.serverCtx }

// RecvMsg ends the request stream: the request came with the call.
func (s streamServer[Resp]) RecvMsg(any) error { return io.EOF }

// streamTransport lets grpc.SetHeader, grpc.SendHeader and
// grpc.SetTrailer work on the handler's context.
type streamTransport[Resp any] struct{ p *streamPipe[Resp] }

func (t streamTransport[Resp]) Method() string                  { return t.p.method }
func (t streamTransport[Resp]) SetHeader(md metadata.MD) error  { return t.p.setHeader(md) }
func (t streamTransport[Resp]) SendHeader(md metadata.MD) error { return t.p.sendHeader(md) }
func (t streamTransport[Resp]) SetTrailer(md metadata.MD) error {
	t.p.setTrailer(md)
	return nil
}

// streamClient is the caller's end; like a gRPC client stream, it is for
// one goroutine.
type streamClient[Resp any] struct{ p *streamPipe[Resp] }

// Recv returns the handler's next message, io.EOF once it returned nil, or
// its error.
func (c streamClient[Resp]) Recv() (*Resp, error) {
	p := c.p
	if p.holding {
		p.holding = false
		p.ack <- struct{}{}
	}
	select {
	case m := <-p.msgs:
		p.holding = true
		return m, nil
	case <-p.done:
		// The handler's last Send completed before it returned, so no
		// message can be waiting.
		p.mu.Lock()
		err := p.err
		p.mu.Unlock()
		if err == nil {
			err = io.EOF
		}
		return nil, err
	case <-p.clientCtx.Done():
		return nil, p.clientCtx.Err()
	}
}

// Header waits for the handler's header, as a gRPC client stream does.
func (c streamClient[Resp]) Header() (metadata.MD, error) {
	select {
	case <-c.p.headerOut:
	case <-c.p.clientCtx.Done():
		return nil, c.p.clientCtx.Err()
	}
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.p.header.Copy(), nil
}

// Trailer returns the handler's trailer; it is complete once Recv has
// returned an error.
func (c streamClient[Resp]) Trailer() metadata.MD {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.p.trailer.Copy()
}

// CloseSend does nothing: the request was sent with the call.
func (c streamClient[Resp]) CloseSend() error         { return nil }
func (c streamClient[Resp]) Context() context.Context { return c.p.clientCtx }
func (c streamClient[Resp]) SendMsg(any) error {
	return errors.New("inproc: the request was sent with the call")
}

// RecvMsg is not supported: messages are handed over, not decoded into
// the caller's; use Recv.
func (c streamClient[Resp]) RecvMsg(any) error {
	return errors.New("inproc: RecvMsg is not supported, use Recv")
}
