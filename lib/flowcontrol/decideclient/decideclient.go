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
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// Client is one Decide stream. It is safe for concurrent use. Once the
// stream ends (Close, an error, the server going away) every call fails
// with the stream's error; open a new Client to go on.
type Client struct {
	stream grpc.BidiStreamingClient[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse]
	sendMu sync.Mutex // one Send at a time
	// mu guards next, waiting and err.
	mu   sync.Mutex
	next uint64
	// waiting are the calls in progress, by id; each channel gets its
	// answer, or is closed when the stream ends.
	waiting map[uint64]chan *flowcontrolv1.DecideResponse
	err     error // why the stream ended
	done    chan struct{}
}

// Open opens a Decide stream on conn; it lasts until ctx ends or Close.
func Open(ctx context.Context, conn grpc.ClientConnInterface) (*Client, error) {
	st, err := flowcontrolv1.NewDecisionServiceClient(conn).Decide(ctx)
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	c := &Client{stream: st, waiting: map[uint64]chan *flowcontrolv1.DecideResponse{}, done: make(chan struct{})}
	go c.receive()
	return c, nil
}

// receive hands each answer to its caller until the stream ends, then
// fails the calls still waiting.
func (c *Client) receive() {
	defer close(c.done)
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
		ch := c.waiting[resp.GetId()]
		delete(c.waiting, resp.GetId())
		c.mu.Unlock()
		if ch != nil {
			ch <- resp // buffered: never blocks
		}
	}
}

// send sends req with a new id and returns the channel of its answer.
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
	c.sendMu.Lock()
	err := c.stream.Send(req)
	c.sendMu.Unlock()
	if err != nil {
		// The stream is broken (Send says io.EOF); receive fails every
		// waiting call with the stream's status, which is the answer.
		<-c.done
		return nil, c.Err()
	}
	return ch, nil
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

// Acquire is FlowControlService.Acquire on the stream. When ctx ends
// first, the call is cancelled (its request leaves its queue) and ctx's
// error returned; a grant that crossed the cancellation is released.
func (c *Client) Acquire(ctx context.Context, req *flowcontrolv1.AcquireRequest) (*flowcontrolv1.AcquireResponse, error) {
	call := &flowcontrolv1.DecideRequest{Call: &flowcontrolv1.DecideRequest_Acquire{Acquire: req}}
	ch, err := c.send(call)
	if err != nil {
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		resp, err := c.answer(resp, ok)
		if err != nil {
			return nil, err
		}
		return resp.GetAcquire(), nil
	case <-ctx.Done():
	}
	c.sendMu.Lock()
	_ = c.stream.Send(&flowcontrolv1.DecideRequest{Id: call.GetId(), Call: &flowcontrolv1.DecideRequest_Cancel{Cancel: true}})
	c.sendMu.Unlock()
	// The answer follows the cancellation at once (or the stream ends).
	resp, ok := <-ch
	if resp, err := c.answer(resp, ok); err == nil {
		if g := resp.GetAcquire().GetGrant(); g.GetId() != "" {
			_, _ = c.ReleaseGrants(context.WithoutCancel(ctx), []string{g.GetId()})
		}
	}
	return nil, ctx.Err()
}

// ReleaseGrants is FlowControlService.ReleaseGrants on the stream.
func (c *Client) ReleaseGrants(ctx context.Context, ids []string) (*flowcontrolv1.ReleaseGrantsResponse, error) {
	ch, err := c.send(&flowcontrolv1.DecideRequest{Call: &flowcontrolv1.DecideRequest_ReleaseGrants{ReleaseGrants: &flowcontrolv1.ReleaseGrantsRequest{GrantIds: ids}}})
	if err != nil {
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		resp, err := c.answer(resp, ok)
		if err != nil {
			return nil, err
		}
		return resp.GetReleaseGrants(), nil
	case <-ctx.Done():
		return nil, ctx.Err() // the release goes on; its answer is dropped
	}
}

// Close half-closes the stream, waits for the server to answer the calls
// in progress and end it, and returns the stream's error, if any.
func (c *Client) Close() error {
	c.sendMu.Lock()
	err := c.stream.CloseSend()
	c.sendMu.Unlock()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil && !errors.Is(c.err, io.EOF) {
		return c.err
	}
	return err
}
