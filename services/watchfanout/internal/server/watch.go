package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// watchStart is where a watch starts, resolved from its request.
type watchStart struct {
	// rv is the requested resourceVersion, -1 when unset.
	rv int64
	// initial sends the current state first; endBookmark then sends the
	// k8s.io/initial-events-end bookmark.
	initial, endBookmark bool
}

// parseWatch validates the resourceVersion parameters of a watch, as
// kube-apiserver does:
//
//	sendInitialEvents unset:  RV unset → consistent state, then changes
//	                          RV "0"   → any state, then changes
//	                          RV N     → changes after N
//	sendInitialEvents=true:   state not older than RV (unset: consistent),
//	                          the initial-events-end bookmark, then changes
//	sendInitialEvents=false:  no state; changes after RV (unset: after a
//	                          consistent revision; "0": the cache's)
func parseWatch(req *watchv1.WatchRequest) (watchStart, error) {
	rv, err := parseRV(req.GetResourceVersion())
	if err != nil {
		return watchStart{}, err
	}
	switch match := req.GetResourceVersionMatch(); match {
	case "":
	case string(metav1.ResourceVersionMatchNotOlderThan):
		if req.SendInitialEvents == nil {
			return watchStart{}, apierrors.NewBadRequest("resourceVersionMatch NotOlderThan is only supported for watch with sendInitialEvents set")
		}
	default:
		return watchStart{}, apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch %q is not supported for watch", match))
	}
	if req.SendInitialEvents != nil {
		if req.GetResourceVersionMatch() != string(metav1.ResourceVersionMatchNotOlderThan) {
			return watchStart{}, apierrors.NewBadRequest("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
		}
		if req.GetSendInitialEvents() && !req.GetAllowBookmarks() {
			return watchStart{}, apierrors.NewBadRequest("sendInitialEvents requires allowWatchBookmarks=true")
		}
		return watchStart{rv: rv, initial: req.GetSendInitialEvents(), endBookmark: req.GetSendInitialEvents()}, nil
	}
	return watchStart{rv: rv, initial: rv <= 0}, nil
}

// Watch streams events. Before the stream starts (bad request, unknown
// resource, cache not synced) it fails with a gRPC status carrying an
// api.v1.Status. Then the first message is empty; failures after it
// (410 Expired, 504 for a resourceVersion the cache does not reach in
// time, 429 for a watcher that fell behind) are one ERROR frame, after
// which the stream ends with OK. The stream also ends with OK at the
// timeout and when the service shuts down.
func (s *Server) Watch(req *watchv1.WatchRequest, stream watchv1.WatchService_WatchServer) error {
	r, err := s.resolve(req.GetResource())
	if err != nil {
		return toGRPC(err)
	}
	f, err := format(req.GetEncoding(), req.GetIncludeObject())
	if err != nil {
		return toGRPC(err)
	}
	flt, err := filter(r, req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		return toGRPC(err)
	}
	start, err := parseWatch(req)
	if err != nil {
		return toGRPC(err)
	}
	timeout := s.cfg.WatchTimeout
	if t := req.GetTimeoutSeconds(); t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	ctx, cancel := context.WithTimeout(stream.Context(), timeout)
	defer cancel()
	if err := stream.Send(&watchv1.WatchResponse{}); err != nil {
		return err
	}
	b := &batcher{stream: stream, max: s.cfg.MaxBatchBytes}
	defer b.release()
	err = s.runWatch(ctx, r, f, cache.WatchOptions{Namespace: req.GetNamespace(), Filter: flt, Bookmarks: req.GetAllowBookmarks()}, start, b)
	switch {
	case err == nil, errors.Is(err, cache.ErrClosed), ctx.Err() != nil && stream.Context().Err() == nil:
		// Timeout or shutdown: the stream ends; the client re-watches.
		return b.flush()
	case stream.Context().Err() != nil:
		return nil
	}
	st := watchError(err)
	frame, ferr := r.ErrorFrame(f, &st)
	if ferr != nil {
		return ferr
	}
	if err := b.add(frame, 0); err != nil {
		return err
	}
	return b.flush()
}

// watchError is the Status of an ERROR frame.
func watchError(err error) metav1.Status {
	var expired *cache.ExpiredError
	switch {
	case errors.As(err, &expired):
		return apierrors.NewResourceExpired(expired.Error()).Status()
	case errors.Is(err, cache.ErrTooSlow):
		return apierrors.NewTooManyRequests("the watcher fell behind; re-watch from the resourceVersion of the last event received", 1).Status()
	case errors.Is(err, cache.ErrReset):
		return apierrors.NewResourceExpired("the watch cache re-listed from the store: too old resource version").Status()
	}
	return apiStatus(err)
}

func (s *Server) runWatch(ctx context.Context, r *cache.Resource, f cache.Format, opts cache.WatchOptions, start watchStart, b *batcher) error {
	switch {
	case start.rv < 0:
		// Unset: consistent. Without initial events the watch starts right
		// after the revision the consistent read established — not after
		// whatever the cache holds once the wait is over, which would lose
		// the writes that landed during the wait.
		rev, err := s.waitConsistent(ctx)
		if err != nil {
			return err
		}
		opts.Initial, opts.After = start.initial, -1
		if !start.initial {
			opts.After = rev
		}
	case start.rv == 0:
		opts.Initial, opts.After = start.initial, -1
	case start.initial:
		// sendInitialEvents=true with RV N: state not older than N.
		if err := s.waitNotOlder(ctx, start.rv); err != nil {
			return err
		}
		opts.Initial = true
	default:
		opts.After = start.rv
	}
	sub, err := r.Watch(opts)
	if err != nil {
		return err
	}
	defer sub.Close()

	if sub.Initial != nil {
		if err := s.sendInitial(ctx, sub, f, start.endBookmark, b, opts); err != nil {
			return err
		}
		// The snapshot pins the tree as it was at sub.Rev (a clone shares
		// nodes until they change): let it go now, not when the watch ends.
		sub.Initial = nil
	}
	for _, ev := range sub.Replay {
		if kind, ok := sub.Kind(ev); ok {
			if err := b.event(ev, kind, f); err != nil {
				return err
			}
		}
	}
	sub.Replay = nil
	if err := b.flush(); err != nil {
		return err
	}
	var buf []cache.Item
	for {
		items, err := sub.Next(ctx, buf)
		if err != nil {
			return err
		}
		for i, it := range items {
			if err := b.event(it.Ev, it.Kind, f); err != nil {
				return err
			}
			items[i] = cache.Item{}
		}
		if err := b.flush(); err != nil {
			return err
		}
		buf = items
	}
}

// sendInitial sends the snapshot as ADDED events (and the end bookmark),
// holding one of InitialEventsConcurrency slots.
func (s *Server) sendInitial(ctx context.Context, sub *cache.Subscription, f cache.Format, endBookmark bool, b *batcher, opts cache.WatchOptions) error {
	select {
	case s.initial <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.initial }()
	var err error
	sub.Initial.Ascend("", func(ev *cache.Event) bool {
		if !opts.Filter.Matches(ev.Obj) {
			return true
		}
		err = b.event(ev, cache.FrameAdded, f)
		return err == nil
	})
	if err != nil {
		return err
	}
	if endBookmark {
		ev, err := sub.Resource().Bookmark(sub.Rev, true)
		if err != nil {
			return err
		}
		if err := b.event(ev, cache.FrameBookmark, f); err != nil {
			return err
		}
	}
	return b.flush()
}

// batcher packs frames into WatchResponses of up to max bytes. The frames
// are shared bytes; only the batch buffer (pooled) is per watcher.
type batcher struct {
	stream watchv1.WatchService_WatchServer
	max    int
	buf    *[]byte
	single []byte // a batch of exactly one frame, sent without copying
	n      int
	rev    int64
}

var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, DefaultMaxBatchBytes); return &b }}

func (b *batcher) event(ev *cache.Event, kind cache.FrameKind, f cache.Format) error {
	frame, err := ev.Frame(kind, f)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	return b.add(frame, ev.Rev)
}

func (b *batcher) add(frame []byte, rev int64) error {
	size := len(b.single)
	if b.buf != nil {
		size = len(*b.buf)
	}
	if b.n > 0 && size+len(frame) > b.max {
		if err := b.flush(); err != nil {
			return err
		}
	}
	switch b.n {
	case 0:
		b.single = frame
	case 1:
		if b.buf == nil {
			b.buf = batchPool.Get().(*[]byte)
		}
		*b.buf = append(append((*b.buf)[:0], b.single...), frame...)
		b.single = nil
	default:
		*b.buf = append(*b.buf, frame...)
	}
	b.n++
	if rev > 0 {
		b.rev = rev
	}
	return nil
}

func (b *batcher) flush() error {
	if b.n == 0 {
		return nil
	}
	data := b.single
	if b.n > 1 {
		data = *b.buf
	}
	resp := &watchv1.WatchResponse{Frames: data}
	if b.rev > 0 {
		resp.ResourceVersion = strconv.FormatInt(b.rev, 10)
	}
	err := b.stream.Send(resp)
	// Send has marshalled the message: the buffer can be reused.
	b.n, b.single = 0, nil
	if b.buf != nil {
		*b.buf = (*b.buf)[:0]
		if cap(*b.buf) > 4*b.max {
			b.buf = nil
		} else {
			batchPool.Put(b.buf)
			b.buf = nil
		}
	}
	return err
}

func (b *batcher) release() {
	if b.buf != nil {
		batchPool.Put(b.buf)
		b.buf = nil
	}
}
