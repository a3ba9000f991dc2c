// Package localstream runs a gRPC server-streaming handler in process: the
// caller gets a grpc.ServerStreamingClient whose Recv returns the very
// messages the handler sends, with no encoding, no transport and no flow
// control window in between.
//
// The REST front end reaches the ResourceService's streaming methods (watch,
// streamed lists) through grpc-gateway's client routes, which need a
// client. This package is that client, so that no watch event or list page
// is marshalled to protobuf, framed in HTTP/2 and parsed back once per
// watcher, as a gRPC connection would, even one over an in-memory listener.
//
// Invariant: Send returns only once the receiver is done with the message
// (it has called Recv again, or gone away), as a real stream's Send
// returns only once the message is encoded. Handlers may therefore reuse
// what they sent, and a slow HTTP client slows its handler down instead of
// letting messages pile up.
package localstream

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Call starts handler on req in a new goroutine and returns the client end
// of its stream. The handler's context is ctx with ctx's outgoing metadata
// as its incoming metadata, and grpc.SetHeader and friends work on it as on
// a real server. Cancelling ctx ends the stream.
func Call[Req, Resp any](ctx context.Context, method string, req *Req, handler func(*Req, grpc.ServerStreamingServer[Resp]) error) grpc.ServerStreamingClient[Resp] {
	md, _ := metadata.FromOutgoingContext(ctx)
	p := &pipe[Resp]{
		clientCtx: ctx,
		msgs:      make(chan *Resp),
		ack:       make(chan struct{}, 1),
		headerOut: make(chan struct{}),
		done:      make(chan struct{}),
		method:    method,
	}
	sctx, cancel := context.WithCancel(metadata.NewIncomingContext(ctx, md.Copy()))
	p.serverCtx = grpc.NewContextWithServerTransportStream(sctx, transportStream[Resp]{p})
	go func() {
		defer cancel() // as a gRPC server ends a call's context when its handler returns
		err := handler(req, server[Resp]{p})
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		p.sendHeader(nil)
		close(p.done)
	}()
	return client[Resp]{p}
}

// pipe is one stream. Messages go through msgs one at a time; ack tells
// the sender the receiver is done with the last one.
type pipe[Resp any] struct {
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

func (p *pipe[Resp]) sendHeader(md metadata.MD) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.headerSent {
		if md != nil {
			return errors.New("localstream: header already sent")
		}
		return nil
	}
	p.header = metadata.Join(p.header, md)
	p.headerSent = true
	close(p.headerOut)
	return nil
}

func (p *pipe[Resp]) setHeader(md metadata.MD) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.headerSent {
		return errors.New("localstream: header already sent")
	}
	p.header = metadata.Join(p.header, md)
	return nil
}

func (p *pipe[Resp]) setTrailer(md metadata.MD) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trailer = metadata.Join(p.trailer, md)
}

// server is the handler's end.
type server[Resp any] struct{ p *pipe[Resp] }

// Send hands m to the receiver and waits until it is done with it.
func (s server[Resp]) Send(m *Resp) error {
	p := s.p
	if err := p.sendHeader(nil); err != nil {
		return err
	}
	select {
	case p.msgs <- m:
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

func (s server[Resp]) SetHeader(md metadata.MD) error  { return s.p.setHeader(md) }
func (s server[Resp]) SendHeader(md metadata.MD) error { return s.p.sendHeader(md) }
func (s server[Resp]) SetTrailer(md metadata.MD)       { s.p.setTrailer(md) }
func (s server[Resp]) Context() context.Context        { return s.p.serverCtx }

func (s server[Resp]) SendMsg(m any) error {
	r, ok := m.(*Resp)
	if !ok {
		return errors.New("localstream: SendMsg of the wrong type")
	}
	return s.Send(r)
}

func (s server[Resp]) RecvMsg(any) error { return io.EOF } // the request came with Call

// transportStream lets grpc.SetHeader, grpc.SendHeader and grpc.SetTrailer
// work on the handler's context.
type transportStream[Resp any] struct{ p *pipe[Resp] }

func (t transportStream[Resp]) Method() string                  { return t.p.method }
func (t transportStream[Resp]) SetHeader(md metadata.MD) error  { return t.p.setHeader(md) }
func (t transportStream[Resp]) SendHeader(md metadata.MD) error { return t.p.sendHeader(md) }
func (t transportStream[Resp]) SetTrailer(md metadata.MD) error {
	t.p.setTrailer(md)
	return nil
}

// client is the caller's end; like a gRPC client stream, it is for one
// goroutine.
type client[Resp any] struct{ p *pipe[Resp] }

// Recv returns the handler's next message, io.EOF once it returned nil, or
// its error.
func (c client[Resp]) Recv() (*Resp, error) {
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
func (c client[Resp]) Header() (metadata.MD, error) {
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
func (c client[Resp]) Trailer() metadata.MD {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.p.trailer.Copy()
}

// CloseSend does nothing: the request was sent with Call.
func (c client[Resp]) CloseSend() error         { return nil }
func (c client[Resp]) Context() context.Context { return c.p.clientCtx }
func (c client[Resp]) SendMsg(any) error {
	return errors.New("localstream: the request was sent with Call")
}

// RecvMsg is not supported: messages are handed over, not decoded into the
// caller's; use Recv.
func (c client[Resp]) RecvMsg(any) error {
	return errors.New("localstream: RecvMsg is not supported, use Recv")
}
