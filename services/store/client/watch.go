package client

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Watch runs one logical watch across members and stream failures. It
// opens a watch for req and calls fn with every response that carries
// events or a progress notification, in order. When the stream ends for
// any reason but ctx (a member stopped, the leader changed, the store
// cancelled a slow watcher) it re-watches, on the next member, from the
// revision after the last one delivered: no event is lost or repeated.
//
// It returns ctx's error, fn's error, or the store's error for a watch that
// cannot continue (OUT_OF_RANGE with a CompactedError detail when the next
// revision was compacted; INVALID_ARGUMENT).
func (c *Client) Watch(ctx context.Context, req *storev1.WatchCreateRequest, fn func(*storev1.WatchResponse) error) error {
	req = proto.Clone(req).(*storev1.WatchCreateRequest)
	next := &resume{start: req.GetStartRevision()} // start 0 until the first created response
	backoff := 10 * time.Millisecond
	for {
		err := c.watchOnce(ctx, req, next, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fnErr *callbackError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		switch status.Code(err) {
		case codes.OutOfRange, codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated:
			return err
		}
		// Rotate and retry from next.
		idx := int(c.preferred.Load())
		c.preferred.CompareAndSwap(int32(idx), int32((idx+1)%len(c.conns)))
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// resume is where a watch continues: at revision start, skipping the first
// skip events of that revision (the store may split one revision's events
// over several responses, so a stream can end in the middle of one).
type resume struct {
	start int64
	skip  int
}

// countRev counts the events of revision rev.
func countRev(evs []*storev1.Event, rev int64) int {
	n := 0
	for _, ev := range evs {
		if ev.GetKv().GetModRevision() == rev {
			n++
		}
	}
	return n
}

// watchOnce runs one stream from next, advancing it past every delivered
// event.
func (c *Client) watchOnce(ctx context.Context, req *storev1.WatchCreateRequest, next *resume, fn func(*storev1.WatchResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.WatchService().Watch(ctx)
	if err != nil {
		return err
	}
	r := proto.Clone(req).(*storev1.WatchCreateRequest)
	r.StartRevision = next.start
	skip := next.skip // events of next.start already delivered
	if err := stream.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: r}}); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return status.Error(codes.Unavailable, "client: watch stream ended")
		}
		if err != nil {
			return err
		}
		if resp.GetCreated() {
			if next.start == 0 {
				next.start = resp.GetHeader().GetRevision() + 1
			}
			continue
		}
		if resp.GetCanceled() {
			if resp.GetCompactRevision() > 0 {
				return status.Errorf(codes.OutOfRange, "client: watch canceled: revision %d compacted", resp.GetCompactRevision())
			}
			return status.Errorf(codes.Unavailable, "client: watch canceled: %s", resp.GetCancelReason())
		}
		var evs []*storev1.Event
		for _, ev := range resp.GetEvents() {
			if ev.GetKv().GetModRevision() == r.StartRevision && skip > 0 {
				skip--
				continue
			}
			evs = append(evs, ev)
		}
		if len(evs) > 0 {
			last := evs[len(evs)-1].GetKv().GetModRevision()
			if last == next.start {
				next.skip += countRev(evs, last)
			} else {
				next.start, next.skip = last, countRev(evs, last)
			}
		} else if resp.GetProgressNotify() && resp.GetHeader().GetRevision()+1 > next.start {
			next.start, next.skip = resp.GetHeader().GetRevision()+1, 0
		}
		if len(resp.GetEvents()) > 0 && len(evs) == 0 {
			continue
		}
		resp.Events = evs
		if err := fn(resp); err != nil {
			return &callbackError{err: err}
		}
	}
}
