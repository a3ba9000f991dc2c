package watch

import (
	"context"
	"errors"
	"fmt"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// Watcher is one registered watch. Run delivers its responses; only the
// goroutine running Run touches the fields marked "Run only".
type Watcher struct {
	h              *Hub
	key, end       []byte
	prevKV         bool
	progressNotify bool
	start          int64 // first revision whose events are sent
	histTo         int64 // registration point: history covers [start, histTo]

	hist        *mvcc.History // Run only; nil once caught up
	live        chan []*storev1.Event
	progressReq chan struct{}

	// canceled is closed by the hub (under h.mu) when it ends the watcher;
	// reason is written before the close.
	canceled chan struct{}
	reason   string
	// caughtUp is guarded by h.mu.
	caughtUp bool
}

// Rev returns the hub revision at registration: the watch's "created"
// revision.
func (w *Watcher) Rev() int64 { return w.histTo }

// Canceled is closed when the hub ends the watcher (too slow, shutdown).
func (w *Watcher) Canceled() <-chan struct{} { return w.canceled }

// RequestProgress asks Run to send a progress notification as soon as every
// event up to the current revision has been sent. Never blocks.
func (w *Watcher) RequestProgress() {
	select {
	case w.progressReq <- struct{}{}:
	default:
	}
}

// Close unregisters the watcher and releases its history; Run calls it on
// return. Safe to call more than once, but not concurrently with Run.
func (w *Watcher) Close() {
	w.h.unregister(w)
	if w.hist != nil {
		w.hist.Close()
		w.hist = nil
	}
}

// filter returns the events w wants, prev_kv removed unless requested.
func (w *Watcher) filter(events []*storev1.Event) []*storev1.Event {
	var out []*storev1.Event
	for _, ev := range events {
		if ev.GetKv().GetModRevision() < w.start || !mvcc.InRange(ev.GetKv().GetKey(), w.key, w.end) {
			continue
		}
		if !w.prevKV && ev.PrevKv != nil {
			ev = &storev1.Event{Type: ev.Type, Kv: ev.Kv}
		}
		out = append(out, ev)
	}
	return out
}

// Run sends the watcher's responses with send until ctx ends, send fails or
// the hub cancels the watcher; in the last case it sends a response with
// canceled set and the reason, and returns nil. Responses carry only
// header.revision; the caller fills the rest of the header.
func (w *Watcher) Run(ctx context.Context, send func(*storev1.WatchResponse) error) error {
	defer w.Close()
	out := responder{w: w, send: send}
	if w.hist != nil {
		err := w.hist.Events(ctx, w.start, w.histTo, w.key, w.end, w.prevKV, out.add)
		w.hist.Close()
		w.hist = nil
		if errors.Is(err, errCanceled) {
			return w.sendCancel(send)
		}
		if err != nil {
			return fmt.Errorf("watch: catch up: %w", err)
		}
		if err := out.flush(); err != nil {
			return err
		}
		w.h.setCaughtUp(w)
	}

	var tick <-chan time.Time
	if w.progressNotify {
		t := time.NewTicker(w.h.opts.ProgressInterval)
		defer t.Stop()
		tick = t.C
	}
	sentSinceTick, progressDue := false, false
	for {
		select {
		case <-w.canceled:
			return w.sendCancel(send)
		default:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.canceled:
			return w.sendCancel(send)
		case evs := <-w.live:
			for _, ev := range evs {
				if err := out.add(ev); err != nil {
					return err
				}
			}
			if err := out.flush(); err != nil {
				return err
			}
			sentSinceTick = true
		case <-w.progressReq:
			progressDue = true
		case <-tick:
			if !sentSinceTick {
				progressDue = true
			}
			sentSinceTick = false
		}
		if progressDue {
			if rev, ok := w.h.progressRev(w); ok {
				progressDue = false
				if err := send(&storev1.WatchResponse{Header: &storev1.ResponseHeader{Revision: rev}, ProgressNotify: true}); err != nil {
					return err
				}
			}
		}
	}
}

func (w *Watcher) sendCancel(send func(*storev1.WatchResponse) error) error {
	return send(&storev1.WatchResponse{Header: &storev1.ResponseHeader{Revision: w.h.Rev()}, Canceled: true, CancelReason: w.reason})
}

// responder batches events into responses bounded in count and size. A
// response is marked revision_complete unless the next event handed to the
// responder has the same revision as its last: events come in whole
// revisions (a catch-up reads history up to a published revision; each
// live batch is everything after the previous publication), so a response
// flushed at the end of a batch, or before an event of a later revision,
// holds the last of its revision's events.
type responder struct {
	w     *Watcher
	send  func(*storev1.WatchResponse) error
	evs   []*storev1.Event
	bytes int
}

// errCanceled stops a catch-up when the hub cancels the watcher.
var errCanceled = errors.New("watch: watcher cancelled")

func (r *responder) add(ev *storev1.Event) error {
	select {
	case <-r.w.canceled:
		return errCanceled
	default:
	}
	size := len(ev.GetKv().GetKey()) + len(ev.GetKv().GetValue()) + len(ev.GetPrevKv().GetValue()) + 64
	if len(r.evs) > 0 && (len(r.evs) >= r.w.h.opts.MaxEventsPerResponse || r.bytes+size > r.w.h.opts.MaxResponseBytes) {
		last := r.evs[len(r.evs)-1].GetKv().GetModRevision()
		if err := r.send(r.take(last != ev.GetKv().GetModRevision())); err != nil {
			return err
		}
	}
	r.evs = append(r.evs, ev)
	r.bytes += size
	return nil
}

// flush sends the events held, if any, at the end of a batch of whole
// revisions: the response completes its last revision.
func (r *responder) flush() error {
	if len(r.evs) == 0 {
		return nil
	}
	return r.send(r.take(true))
}

// take returns the events held as one response, marked revision_complete
// when complete, and empties the responder.
func (r *responder) take(complete bool) *storev1.WatchResponse {
	resp := &storev1.WatchResponse{
		Header:           &storev1.ResponseHeader{Revision: r.evs[len(r.evs)-1].GetKv().GetModRevision()},
		Events:           r.evs,
		RevisionComplete: complete,
	}
	r.w.h.metrics.events.Add(float64(len(r.evs)))
	r.evs, r.bytes = nil, 0
	return resp
}
