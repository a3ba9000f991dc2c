// Package decideclient makes FlowControlService's Acquire and
// ReleaseGrants calls on one DecisionService.Decide stream: many calls in
// flight at once, each answer matched to its call by id, without an
// HTTP/2 stream and per-call interceptors for each decision.
package decideclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-cp/meridian/lib/telemetry"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// BatchMetadata is the metadata key that client and server send at a
// Decide stream's start (value "1") to say that they take several calls,
// or answers, in one message (DecideRequest.calls,
// DecideResponse.answers).
const BatchMetadata = "meridian-decide-batch"

// Client is one Decide stream. It is safe for concurrent use. Once the
// stream ends (Close, an error, the server going away) every call fails
// with the stream's error; open a new Client to go on.
//
// Calls are sent by whichever caller finds no Send in progress (the
// sender): it sends the calls queued meanwhile, all in one message when
// the server takes batches, until the queue is empty. So a call never
// waits for a goroutine handoff, and under load one Send carries many.
type Client struct {
	stream grpc.BidiStreamingClient[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse]
	// batch is set once the server's header says it takes batches.
	batch atomic.Bool
	// outMu guards out, sending, closeSend and closeErr.
	outMu   sync.Mutex
	out     []*flowcontrolv1.DecideRequest // queued, in order
	sending bool                           // a caller is the sender
	// closeSend asks the sender to half-close the stream once the queue
	// is empty; closeErr is CloseSend's error.
	closeSend, closed bool
	closeErr          error
	// mu guards next, waiting and err.
	mu   sync.Mutex
	next uint64
	// waiting are the calls in progress, by id; each channel gets its
	// answer, or is closed when the stream ends.
	waiting map[uint64]chan *flowcontrolv1.DecideResponse
	err     error // why the stream ended
	done    chan struct{}
	sent    chan struct{} // closed once the stream is half-closed
}

// Open opens a Decide stream on conn; it lasts until ctx ends or Close.
func Open(ctx context.Context, conn grpc.ClientConnInterface) (*Client, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, BatchMetadata, "1")
	st, err := flowcontrolv1.NewDecisionServiceClient(conn).Decide(ctx)
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	c := &Client{stream: st, waiting: map[uint64]chan *flowcontrolv1.DecideResponse{}, done: make(chan struct{}), sent: make(chan struct{})}
	go c.receive()
	return c, nil
}

// receive hands each answer to its caller until the stream ends, then
// fails the calls still waiting. It first waits for the server's header
// (a server that takes batches sends it at once; an older one with its
// first answer), and from then on the calls go in batches when the
// header says so.
func (c *Client) receive() {
	defer close(c.done)
	if md, err := c.stream.Header(); err == nil && slices.Contains(md.Get(BatchMetadata), "1") {
		c.batch.Store(true)
	}
	for {
		resp, err := c.stream.Recv()
		c.mu.Lock()
		if err != nil {
			c.err = err
			for _, ch := range c.waiting {
				close(ch)
			}
			clear(c.waiting)
			c.mu.Unlock()
			return
		}
		if answers := resp.GetAnswers(); len(answers) > 0 {
			for _, a := range answers {
				c.deliverLocked(a)
			}
		} else {
			c.deliverLocked(resp)
		}
		c.mu.Unlock()
	}
}

// deliverLocked hands resp to its caller; c.mu is held.
func (c *Client) deliverLocked(resp *flowcontrolv1.DecideResponse) {
	ch := c.waiting[resp.GetId()]
	delete(c.waiting, resp.GetId())
	if ch != nil {
		ch <- resp // buffered, one answer each: never blocks
	}
}

// send sends req with a new id and returns the channel of its answer. A
// failed Send (the stream is broken) is not the call's error: receive
// then sees the stream's end and closes the channel.
func (c *Client) send(req *flowcontrolv1.DecideRequest) (chan *flowcontrolv1.DecideResponse, error) {
	ch := make(chan *flowcontrolv1.DecideResponse, 1)
	c.mu.Lock()
	if c.err != nil {
		defer c.mu.Unlock()
		return nil, c.err
	}
	c.next++
	req.Id = c.next
	c.waiting[req.Id] = ch
	c.mu.Unlock()
	c.enqueue(req)
	return ch, nil
}

// enqueue queues req (nil: none) for sending, and sends the queue when
// no other caller is sending it.
func (c *Client) enqueue(req *flowcontrolv1.DecideRequest) {
	c.outMu.Lock()
	if req != nil {
		c.out = append(c.out, req)
	}
	if c.sending {
		c.outMu.Unlock()
		return
	}
	c.sending = true
	if c.batch.Load() {
		// Let the goroutines ready to run (other callers) queue their
		// calls first, so that one Send carries them all.
		c.outMu.Unlock()
		runtime.Gosched()
		c.outMu.Lock()
	}
	var spare []*flowcontrolv1.DecideRequest
	for len(c.out) > 0 {
		batch := c.out
		c.out = spare[:0]
		c.outMu.Unlock()
		c.write(batch)
		clear(batch)
		spare = batch
		c.outMu.Lock()
	}
	c.sending = false
	if c.closeSend && !c.closed {
		c.closed = true
		c.closeErr = c.stream.CloseSend()
		close(c.sent)
	}
	c.outMu.Unlock()
}

// write sends batch: in one message when the server takes batches.
func (c *Client) write(batch []*flowcontrolv1.DecideRequest) {
	if len(batch) > 1 && c.batch.Load() {
		_ = c.stream.Send(&flowcontrolv1.DecideRequest{Calls: batch})
		return
	}
	for _, req := range batch {
		if c.stream.Send(req) != nil {
			return // the stream is broken: receive fails the calls
		}
	}
}

// Done is closed once the stream has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the stream ended (a gRPC status error, or io.EOF after
// Close); nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// answer returns resp, the call's error as a gRPC status error, or the
// stream's error when it ended first (ok false).
func (c *Client) answer(resp *flowcontrolv1.DecideResponse, ok bool) (*flowcontrolv1.DecideResponse, error) {
	if !ok {
		return nil, c.Err()
	}
	if b := resp.GetError(); b != nil {
		var s spb.Status
		if err := proto.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("decide: an undecodable error: %w", err)
		}
		return nil, status.FromProto(&s).Err()
	}
	return resp, nil
}

// Acquire is FlowControlService.Acquire on the stream; the service's spans
// for it join ctx's span when that is sampled. When ctx ends
// first, the call is cancelled (its request leaves its queue) and ctx's
// error returned; a grant that crossed the cancellation is released.
func (c *Client) Acquire(ctx context.Context, req *flowcontrolv1.AcquireRequest) (*flowcontrolv1.AcquireResponse, error) {
	call := &flowcontrolv1.DecideRequest{Call: &flowcontrolv1.DecideRequest_Acquire{Acquire: req}, Traceparent: telemetry.Traceparent(ctx)}
	resp, err := c.call(ctx, call, func(resp *flowcontrolv1.DecideResponse) {
		if g := resp.GetAcquire().GetGrant(); g.GetId() != "" {
			_, _ = c.ReleaseGrants(context.WithoutCancel(ctx), []string{g.GetId()})
		}
	})
	if err != nil {
		return nil, err
	}
	return resp.GetAcquire(), nil
}

// ReleaseGrants is FlowControlService.ReleaseGrants on the stream. When
// ctx ends first, ctx's error is returned; the release goes on and its
// answer is dropped.
func (c *Client) ReleaseGrants(ctx context.Context, ids []string) (*flowcontrolv1.ReleaseGrantsResponse, error) {
	call := &flowcontrolv1.DecideRequest{Call: &flowcontrolv1.DecideRequest_ReleaseGrants{ReleaseGrants: &flowcontrolv1.ReleaseGrantsRequest{GrantIds: ids}}}
	resp, err := c.call(ctx, call, nil)
	if err != nil {
		return nil, err
	}
	return resp.GetReleaseGrants(), nil
}

// call sends req and returns its answer, or its error as a gRPC status
// error, or the stream's error when the stream ended first. When ctx
// ends first it returns ctx's error; with crossed set, it first cancels
// the call on the stream, waits for the answer (which follows the
// cancellation at once, or the stream ends) and passes crossed an answer
// that is not an error: one decided before the cancellation arrived.
func (c *Client) call(ctx context.Context, req *flowcontrolv1.DecideRequest, crossed func(*flowcontrolv1.DecideResponse)) (*flowcontrolv1.DecideResponse, error) {
	ch, err := c.send(req)
	if err != nil {
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		return c.answer(resp, ok)
	case <-ctx.Done():
	}
	if crossed == nil {
		return nil, ctx.Err()
	}
	c.enqueue(&flowcontrolv1.DecideRequest{Id: req.GetId(), Call: &flowcontrolv1.DecideRequest_Cancel{Cancel: true}})
	resp, ok := <-ch
	if resp, err := c.answer(resp, ok); err == nil {
		crossed(resp)
	}
	return nil, ctx.Err()
}

// Close half-closes the stream once the calls queued are sent, waits for
// the server to answer the calls in progress and end it, and returns the
// stream's error, if any.
func (c *Client) Close() error {
	c.outMu.Lock()
	c.closeSend = true
	c.outMu.Unlock()
	c.enqueue(nil) // half-closes now, or the sender in progress does
	<-c.sent
	<-c.done
	c.outMu.Lock()
	err := c.closeErr
	c.outMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil && !errors.Is(c.err, io.EOF) {
		return c.err
	}
	return err
}
