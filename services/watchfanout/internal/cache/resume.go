package cache

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// resumeFilter is the store connection the cache follows the store
// through. It drops, from a store watch that resumes in the middle of what
// earlier watches delivered, the events the cache has already received.
//
// Why: the cache resumes its store watch from the revision after its
// complete revision, and its complete revision trails the revision of its
// last event until a later event or a progress notification confirms that
// revision is whole (the store may split one revision's events over
// responses). When the store watch ends in between — the member serving it
// stops, as when the store leader goes away — the new watch starts at the
// last event's revision and the store sends that revision's events again;
// applied twice, watchers would receive them twice. The filter counts the
// events delivered at the last revision and skips that many when a watch
// starts at exactly that revision, as the store client's Watch does.
//
// It assumes one store watch at a time (the cache's), whose every
// delivered event the cache applies before it reads the next response.
// Other calls pass through untouched.
type resumeFilter struct {
	grpc.ClientConnInterface

	// mu guards lastRev and atLast.
	mu sync.Mutex
	// lastRev is the revision of the last event delivered on any watch;
	// atLast counts the events of lastRev delivered.
	lastRev int64
	atLast  int
}

var _ grpc.ClientConnInterface = (*resumeFilter)(nil)

// NewStream opens a stream; store watches are filtered.
func (f *resumeFilter) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := f.ClientConnInterface.NewStream(ctx, desc, method, opts...)
	if err != nil || method != storev1.WatchService_Watch_FullMethodName {
		return s, err
	}
	return &filteredWatch{ClientStream: s, f: f}, nil
}

// filteredWatch is one store watch stream. Its fields are used by the
// stream's one sending and one receiving goroutine: start and skip are set
// by the create request, sent before the first receive.
type filteredWatch struct {
	grpc.ClientStream
	f     *resumeFilter
	start int64 // the watch's start revision
	skip  int   // events of start still to drop
}

// SendMsg notes where a watch starts and how many of that revision's
// events were delivered before.
func (w *filteredWatch) SendMsg(m any) error {
	if req, ok := m.(*storev1.WatchRequest); ok && req.GetCreateRequest() != nil {
		cr := req.GetCreateRequest()
		w.f.mu.Lock()
		w.start, w.skip = cr.GetStartRevision(), 0
		if w.start > 0 && w.start == w.f.lastRev {
			w.skip = w.f.atLast
		}
		w.f.mu.Unlock()
	}
	return w.ClientStream.SendMsg(m)
}

// RecvMsg receives a response without the events already delivered, and
// counts the ones it delivers. A response whose every event was dropped
// arrives without events (and without progress_notify: the cache ignores
// it).
func (w *filteredWatch) RecvMsg(m any) error {
	if err := w.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	resp, ok := m.(*storev1.WatchResponse)
	evs := resp.GetEvents()
	if !ok || len(evs) == 0 {
		return nil
	}
	if w.skip > 0 {
		kept := evs[:0:0]
		for _, ev := range evs {
			if w.skip > 0 && ev.GetKv().GetModRevision() == w.start {
				w.skip--
				continue
			}
			kept = append(kept, ev)
		}
		resp.Events, evs = kept, kept
	}
	w.f.mu.Lock()
	for _, ev := range evs {
		if rev := ev.GetKv().GetModRevision(); rev == w.f.lastRev {
			w.f.atLast++
		} else {
			w.f.lastRev, w.f.atLast = rev, 1
		}
	}
	w.f.mu.Unlock()
	return nil
}
