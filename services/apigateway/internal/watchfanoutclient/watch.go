package watchfanoutclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/watchframe"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchpark"
)

// ErrNoReplica: no replica can serve the watch from where it is (each was
// unreachable, went away, or answered that it cannot serve its
// resourceVersion). The caller serves the rest of the watch from the
// store, from Watch.ResumeFrom.
var ErrNoReplica = errors.New("watchfanoutclient: no replica can serve the watch")

// ErrInitialEventsCut: the replica serving the watch's initial events went
// away after some were delivered and before the last one was. No replica
// (nor the store) can send the rest of that snapshot, and a snapshot taken
// now would not line up with what the client holds: the client must list
// again, as after a 410 Expired.
var ErrInitialEventsCut = errors.New("watchfanoutclient: the replica serving the watch's initial events went away before it had sent them all; list again")

// phase is how far a watch has got with its initial events.
type phase int

const (
	// initialPending: the watch starts with initial events and none has
	// been delivered; it can start over anywhere, as asked.
	initialPending phase = iota
	// initialCut: some initial events were delivered, not all; it cannot
	// go on anywhere once its replica is lost.
	initialCut
	// live: every initial event (if any) was delivered; the watch goes on
	// from rv.
	live
)

// Watch is one watch served by the pool's replicas in turn. The caller
// reads it with Recv, from one goroutine, and calls Close when done.
//
// It delivers what watchfanout's Watch would (WatchResponses of
// pre-encoded frames), and keeps the resourceVersion of the last event it
// delivered (each batch carries it in resource_version; bookmarks count).
// When the replica serving it goes away (its stream breaks: UNAVAILABLE),
// drains (the watch ends before the watch's own deadline), or answers that
// it cannot serve the watch's resourceVersion (an ERROR frame with 410
// Expired, 503 or 504; the frame is not delivered), Recv opens the watch on
// another replica from that resourceVersion, without initial events and
// with the watch's other parameters, so that the events go on with no gap
// and no duplicate. Each replica is tried once until the watch delivers
// something again; when none is left Recv returns ErrNoReplica, except
// for a watch that has delivered nothing yet and was refused with 410 by
// a replica: that one gets the 410 ERROR frame, as from kube-apiserver's
// watch cache (the client lists again, rather than the store serving a
// new watch from an old revision).
//
// Initial events: a watch whose replica is lost before it delivered any
// starts over as asked. One lost after it delivered some, but not the
// k8s.io/initial-events-end bookmark, ends with ErrInitialEventsCut. A
// watch asking for initial events the legacy way (resourceVersion unset or
// "0", sendInitialEvents unset) gets no such bookmark, so it is asked of
// the replicas with sendInitialEvents=true (and bookmarks) to learn where
// its initial events end; that bookmark is not delivered, and when the
// client asked for no bookmarks the watch goes on from its resourceVersion
// on a watch of its own parameters.
//
// The watch's deadline (its context's) bounds it as a whole: each replica
// is asked for the time left of it, rounded up, so that a replica's own end
// comes after the deadline and any earlier end is a replica's.
type Watch struct {
	pool      *Pool
	ctx       context.Context
	req       *watchv1.WatchRequest // the caller's
	mediaType string
	onResume  func()
	// done and deadline are ctx's, looked up once: ctxErr runs for every
	// message, where ctx's methods would walk its chain of contexts.
	done     <-chan struct{}
	deadline time.Time // zero: none

	// legacy: the request asks for initial events the legacy way, so
	// replicas are asked with sendInitialEvents=true (see above).
	legacy bool
	phase  phase
	rv     string // in phase live: where the watch goes on from

	stream  grpc.ServerStreamingClient[watchv1.WatchResponse] // a closer
	replica int
	got     bool   // stream delivered a batch
	opened  bool   // a replica served the watch: the next open is a move
	served  bool   // a replica took the watch
	skip    []bool // replicas tried since the watch last delivered something
	ended   bool   // an ERROR frame was delivered, or Close called: nothing follows
	// progressed: the watch delivered something. Until it does, expired
	// is the last replica's 410 ERROR frame.
	progressed bool
	// woken: RecvOrPark returned parked, so its next call comes from the
	// wake-up, when the stream's Recv has something (and will not wait).
	woken   bool
	expired *watchv1.WatchResponse
}

// Watch returns a watch of req over the pool's replicas, opened at the
// first Recv. ctx bounds the watch; its deadline, as it is at this call,
// is the watch's timeout (req's timeout_seconds is replaced by the time
// left of it), and its user (lib/identity) is the caller a replica is
// told of when it serves the watch on a Watch stream of its own (a
// WatchMany stream, shared by many callers' watches, names none).
// onResume, if not nil, is called each time the watch moves to another
// replica.
func (p *Pool) Watch(ctx context.Context, req *watchv1.WatchRequest, onResume func()) *Watch {
	w := &Watch{pool: p, ctx: ctx, done: ctx.Done(), req: req, onResume: onResume, replica: -1, skip: make([]bool, len(p.conns))}
	if d, ok := ctx.Deadline(); ok {
		w.deadline = d
	}
	w.mediaType = negotiation.JSON
	if req.GetEncoding() == watchv1.Encoding_ENCODING_PROTOBUF {
		w.mediaType = negotiation.Protobuf
	}
	switch initial, legacy := initialEvents(req); {
	case legacy:
		w.legacy = true
	case !initial:
		// Changes only: after N, or (sendInitialEvents=false with
		// resourceVersion unset or "0") from where the replica starts,
		// which a watch that delivered nothing may start over from.
		w.phase = live
		if rv := req.GetResourceVersion(); rv != "" && rv != "0" {
			w.rv = rv
		}
	}
	return w
}

// initialEvents reports whether req starts with initial events, and
// whether it asks for them the legacy way (no end bookmark).
func initialEvents(req *watchv1.WatchRequest) (initial, legacy bool) {
	if req.SendInitialEvents != nil {
		return req.GetSendInitialEvents(), false
	}
	rv := req.GetResourceVersion()
	return rv == "" || rv == "0", rv == "" || rv == "0"
}

// ResumeFrom is where the watch stands, for the store to serve the rest
// of it after ErrNoReplica: the resourceVersion to go on from (changes
// after it, no initial events), or ok false when the watch has delivered
// nothing yet and starts as its request asks.
func (w *Watch) ResumeFrom() (rv string, ok bool) {
	if w.phase != live || w.rv == "" {
		return "", false
	}
	return w.rv, true
}

// InitialEventsDelivered reports whether every initial event of the
// watch (if it asked for any) has been delivered by Recv.
func (w *Watch) InitialEventsDelivered() bool { return w.phase == live }

// Served reports whether a replica took the watch at some point: after
// ErrNoReplica, whether the store goes on with a watch watchfanout served,
// or serves one no replica took.
func (w *Watch) Served() bool { return w.served }

// Close ends the watch's stream. It is safe to call more than once.
func (w *Watch) Close() {
	w.closeStream()
	w.ended = true
}

func (w *Watch) closeStream() {
	if w.stream != nil {
		w.stream.(closer).Close()
		w.stream = nil
	}
}

// Recv returns the watch's next batch of frames (never an empty one).
// It returns io.EOF at the watch's end (its deadline, or after an ERROR
// frame), the context's error when the context ended otherwise,
// ErrNoReplica (wrapping the last replica's error) when no replica can
// serve the rest of the watch, ErrInitialEventsCut, or another error of
// the replica (gRPC status) that ends the watch.
func (w *Watch) Recv() (*watchv1.WatchResponse, error) {
	msg, _, err := w.recv(nil)
	return msg, err
}

// RecvOrPark is Recv, except where Recv would wait for the replica's next
// message on a stream whose reader can park (watchmux's, a watchpark.Parker): there
// it calls park with the stream, and when park reports true (it left a
// wake-up with the stream's Park), RecvOrPark returns parked at once; the
// caller calls it again once woken, and not before: that call reads the
// stream without trying to park first. RecvOrPark waits as Recv does on a
// stream that cannot park (a Watch stream of its own) and while it opens
// the watch on a replica.
func (w *Watch) RecvOrPark(park func(watchpark.Parker) bool) (_ *watchv1.WatchResponse, parked bool, _ error) {
	return w.recv(park)
}

func (w *Watch) recv(park func(watchpark.Parker) bool) (*watchv1.WatchResponse, bool, error) {
	for {
		if w.ended {
			return nil, false, io.EOF
		}
		if err := w.ctxErr(); err != nil {
			w.Close()
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, false, io.EOF
			}
			return nil, false, err
		}
		if w.stream == nil {
			if err := w.open(); err != nil {
				if errors.Is(err, ErrNoReplica) && !w.progressed && w.expired != nil {
					// A new watch from a resourceVersion older than
					// every reachable replica's history: the 410, as
					// kube-apiserver's watch cache answers it.
					return w.expired, false, nil
				}
				return nil, false, err
			}
		}
		switch {
		case park == nil:
		case w.woken:
			w.woken = false
		default:
			if p, ok := w.stream.(watchpark.Parker); ok && park(p) {
				w.woken = true
				return nil, true, nil
			}
		}
		msg, err := w.stream.Recv()
		w.unprime()
		if err != nil {
			if w.ctxErr() != nil {
				continue // the loop's check reports it
			}
			if !lost(err, w.got) {
				w.Close()
				return nil, false, err
			}
			w.lose()
			continue
		}
		if out := w.take(msg); out != nil {
			return out, false, nil
		}
	}
}

// unprime drops the primed wrapper of w's stream once it has delivered
// its first message: the stream under it goes on alone, so that a parked
// watch does not keep the wrapper for its life. A stream that could not be
// closed (closer) without it keeps it.
func (w *Watch) unprime() {
	p, ok := w.stream.(*primed[watchv1.WatchResponse])
	if !ok || !p.done {
		return
	}
	if _, ok := p.ServerStreamingClient.(closer); ok {
		w.stream = p.ServerStreamingClient
	}
}

// ctxErr is the watch's context's error; once the context's deadline has
// passed, DeadlineExceeded even before its timer has fired. The replica
// was asked for the time left, rounded up, so its own end comes just
// after the deadline: under load it can arrive before the late timer
// has ended the context, and must not be taken for a replica lost.
// The deadline is the one ctx had when the watch was made (Pool.Watch).
func (w *Watch) ctxErr() error {
	select {
	case <-w.done:
		return w.ctx.Err()
	default:
	}
	if !w.deadline.IsZero() && !time.Now().Before(w.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// lost reports whether a stream's error means its replica is lost to the
// watch (gone, draining, or ended it early) while the watch goes on; got
// is whether the stream delivered a batch. Before it did, a replica
// without watches (UNIMPLEMENTED) or whose answer is too large
// (RESOURCE_EXHAUSTED) is passed over too, as the first open's fallback
// to the store always did; after, RESOURCE_EXHAUSTED is a watch cut off
// as too slow, which ends it.
func lost(err error, got bool) bool {
	if errors.Is(err, io.EOF) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled:
		return true
	case codes.Unimplemented, codes.ResourceExhausted:
		return !got
	}
	return false
}

// lose gives up the replica serving the watch: it is not tried again
// until the watch delivers something.
func (w *Watch) lose() {
	w.closeStream()
	if w.replica >= 0 {
		w.skip[w.replica] = true
	}
}

// open opens the watch on a replica not skipped, from where it stands.
func (w *Watch) open() error {
	if w.phase == initialCut {
		w.Close()
		return ErrInitialEventsCut
	}
	req := w.request()
	// The stream ends when the watch's context does, or when closed
	// (muxed.Watch: it carries the context's end, not its deadline).
	s, i, err := w.pool.openWatch(w.ctx, req, w.skip)
	if err != nil {
		w.Close()
		switch status.Code(err) {
		case codes.Unavailable, codes.Unimplemented, codes.ResourceExhausted:
			return fmt.Errorf("%w: %w", ErrNoReplica, err)
		}
		return err
	}
	if w.opened && w.onResume != nil {
		w.onResume()
	}
	w.stream, w.replica, w.opened, w.served, w.got = s, i, true, true, false
	return nil
}

// request is the request for a replica: as asked until the watch is live,
// then the changes after rv.
func (w *Watch) request() *watchv1.WatchRequest {
	req := &watchv1.WatchRequest{
		Resource: w.req.GetResource(), Namespace: w.req.GetNamespace(),
		LabelSelector: w.req.GetLabelSelector(), FieldSelector: w.req.GetFieldSelector(),
		ResourceVersion: w.req.GetResourceVersion(), ResourceVersionMatch: w.req.GetResourceVersionMatch(),
		SendInitialEvents: w.req.SendInitialEvents, AllowBookmarks: w.req.GetAllowBookmarks(),
		TimeoutSeconds: w.req.GetTimeoutSeconds(), Encoding: w.req.GetEncoding(), IncludeObject: w.req.GetIncludeObject(),
	}
	if d, ok := w.ctx.Deadline(); ok {
		req.TimeoutSeconds = int64(math.Ceil(time.Until(d).Seconds()))
		req.TimeoutSeconds = max(req.TimeoutSeconds, 1)
	}
	switch {
	case w.phase == live && w.rv != "":
		req.ResourceVersion, req.ResourceVersionMatch, req.SendInitialEvents = w.rv, "", nil
	case w.legacy:
		yes := true
		req.ResourceVersionMatch, req.SendInitialEvents, req.AllowBookmarks = string(metav1.ResourceVersionMatchNotOlderThan), &yes, true
	}
	return req
}

// take looks at a message of the replica: it returns what to deliver, or
// nil when there is nothing to (the message was empty, or held only what
// the client does not get).
func (w *Watch) take(msg *watchv1.WatchResponse) *watchv1.WatchResponse {
	frames := msg.GetFrames()
	if len(frames) == 0 {
		return nil
	}
	before, last, ok := watchframe.Last(frames, w.mediaType)
	if !ok {
		// Not frames this relay can read: delivered as they are; where
		// initial events end cannot be told from them.
		if w.phase == initialPending {
			w.phase = initialCut
		}
		w.delivered(msg.GetResourceVersion())
		return msg
	}
	typ, _ := watchframe.Type(last, w.mediaType)
	switch {
	case typ == watch.Error:
		if st, err := watchframe.ErrorStatus(last, w.mediaType); err == nil && cannotServe(st) {
			// The replica cannot serve the watch from here; what came
			// before the ERROR frame is delivered, and the watch goes on
			// elsewhere from the last of it.
			if len(before) == 0 {
				if st.Code == http.StatusGone && !w.progressed {
					w.expired = msg
				}
				w.lose()
				return nil
			}
			if w.phase == initialPending {
				w.phase = initialCut
			}
			w.delivered(msg.GetResourceVersion())
			w.lose()
			return &watchv1.WatchResponse{Frames: before, ResourceVersion: msg.GetResourceVersion()}
		}
		// Any other ERROR ends the watch, as it is.
		w.ended = true
		w.closeStream()
		if w.phase == initialPending {
			w.phase = initialCut
		}
		return msg
	case typ == watch.Bookmark && w.phase != live:
		// The k8s.io/initial-events-end bookmark: the only bookmark
		// before the initial events end, and the last frame of its batch.
		w.phase = live
		w.delivered(msg.GetResourceVersion())
		if !w.legacy {
			return msg
		}
		if !w.req.GetAllowBookmarks() {
			// Asked with bookmarks the client does not want: go on from
			// here with a watch of the client's own parameters. That is
			// not a move: the replica is not skipped, onResume not called.
			w.closeStream()
			w.opened = false
		}
		if len(before) == 0 {
			return nil
		}
		return &watchv1.WatchResponse{Frames: before, ResourceVersion: msg.GetResourceVersion()}
	}
	if w.phase == initialPending {
		w.phase = initialCut
	}
	w.delivered(msg.GetResourceVersion())
	return msg
}

// delivered records that a batch up to rv was delivered: the watch made
// progress, so every replica may be tried again.
func (w *Watch) delivered(rv string) {
	w.got, w.progressed = true, true
	clear(w.skip)
	if w.phase == live && rv != "" {
		w.rv = rv
	}
}

// cannotServe reports whether an ERROR frame's Status means the replica
// cannot serve the watch from where it is, which another replica or the
// store may: its history does not reach the resourceVersion (410, also
// after its cache re-listed from the store), it cannot reach the store
// (503), or it could not catch up in time (504).
func cannotServe(st *metav1.Status) bool {
	switch st.Code {
	case http.StatusGone, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// openWatch opens req on the first replica, in Client's order, that skip
// does not name and that takes it; as failover.Watch does, a replica that
// answers UNAVAILABLE at the call or with its first message is passed over
// (and added to skip). It returns the stream and the replica's index, or
// UNAVAILABLE when no replica took it.
func (p *Pool) openWatch(ctx context.Context, req *watchv1.WatchRequest, skip []bool) (grpc.ServerStreamingClient[watchv1.WatchResponse], int, error) {
	err := status.Error(codes.Unavailable, "watchfanout: every replica was tried")
	for _, i := range p.order() {
		if skip[i] {
			continue
		}
		var s grpc.ServerStreamingClient[watchv1.WatchResponse]
		s, err = openPrimed(p.clients[i:i+1], func(c watchv1.WatchServiceClient) (grpc.ServerStreamingClient[watchv1.WatchResponse], error) {
			return c.Watch(ctx, req)
		})
		if err == nil {
			return s, i, nil
		}
		if !unavailable(err) {
			return nil, -1, err
		}
		skip[i] = true
	}
	return nil, -1, err
}
