package server

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

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

// batcher packs frames into WatchResponses of up to max bytes. The frames
// are shared bytes; only the batch buffer (pooled) is per watcher.
type batcher struct {
	send   func(*watchv1.WatchResponse) error
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

// size is the bytes batched.
func (b *batcher) size() int {
	if b.buf != nil {
		return len(*b.buf)
	}
	return len(b.single)
}

// fits reports whether frame joins the batch without a flush.
func (b *batcher) fits(frame []byte) bool { return b.n == 0 || b.size()+len(frame) <= b.max }

func (b *batcher) add(frame []byte, rev int64) error {
	if !b.fits(frame) {
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
	err := b.send(resp)
	// The message was marshalled: the buffer can be reused.
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
