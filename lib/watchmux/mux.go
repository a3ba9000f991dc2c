// Package watchmux multiplexes watches of watchfanout over a few
// WatchMany streams, so that a watch costs watchfanout no gRPC stream (and
// no goroutine) of its own.
//
// A Mux hands out streams that behave like watchfanout's Watch streams: the
// same messages in the same order, the same errors (a refusal before the
// watch started is a gRPC status error from Recv; a normal end is io.EOF).
// Callers written for Watch take a Mux's streams unchanged.
package watchmux

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/ctxhook"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
)

// Defaults of Options fields.
const (
	DefaultWatchesPerStream = 1000
	DefaultBuffer           = 256
)

// brokenWait bounds how long opening a watch on a stream that just broke
// waits for the stream's status (session.open).
const brokenWait = 5 * time.Second

// Options tune a Mux. Zero fields mean their defaults.
type Options struct {
	// WatchesPerStream caps the watches sharing one WatchMany stream (one
	// HTTP/2 stream, one flow-control window); default 1000.
	WatchesPerStream int
	// Buffer is how many messages may wait for one watch's reader: the
	// watch's credit window. watchfanout sends a watch no more than its
	// reader has room for (the reader grants credit as it reads), so a
	// slow reader holds up only its own watch, which watchfanout cuts off as
	// too slow when the watch's events pile up there, as with Watch.
	// Default 256.
	Buffer int
}

// ErrTooSlow ends a watch whose messages overflowed its reader's buffer,
// which only a watchfanout that ignores credit (a version without it)
// makes happen; the client re-watches from the resourceVersion of the
// last event it got.
var ErrTooSlow = status.Error(codes.ResourceExhausted, "watchfanout: the watch's reader fell behind")

// Mux opens watches over WatchMany streams of one watchfanout replica. It
// is safe for concurrent use.
type Mux struct {
	wc   watchv1.WatchServiceClient
	opts Options

	mu       sync.Mutex
	sessions []*session
	nextID   int64
}

// New returns a Mux over wc.
func New(wc watchv1.WatchServiceClient, opts Options) *Mux {
	if opts.WatchesPerStream <= 0 {
		opts.WatchesPerStream = DefaultWatchesPerStream
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	return &Mux{wc: wc, opts: opts}
}

// Watch opens a watch. The returned stream is read by one goroutine; it
// ends when ctx ends (Recv returns ctx's error), the watch ends, or its
// reader closes it (Close). ctx's deadline is not sent to watchfanout:
// only its end counts. Errors opening a WatchMany stream are returned
// here, as Watch would.
func (m *Mux) Watch(ctx context.Context, req *watchv1.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[watchv1.WatchResponse], error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	s, id, err := m.session()
	if err != nil {
		return nil, err
	}
	w := &watchStream{ctx: ctx, s: s, id: id, window: m.opts.Buffer}
	// Registered before the open is sent, so no message can miss it.
	w.stopCtx = ctxhook.AfterFunc(ctx, w.ctxEnded)
	if err := s.open(w, req); err != nil {
		w.stopCtx.Stop()
		return nil, err
	}
	return w, nil
}

// session returns a session with room and a fresh id on it.
func (m *Mux) session() (*session, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	id := m.nextID
	live := m.sessions[:0]
	var pick *session
	for _, s := range m.sessions {
		s.mu.Lock()
		broken, n := s.err != nil, len(s.watches)
		s.mu.Unlock()
		if broken {
			continue
		}
		live = append(live, s)
		if pick == nil && n < m.opts.WatchesPerStream {
			pick = s
		}
	}
	clear(m.sessions[len(live):])
	m.sessions = live
	if pick != nil {
		return pick, id, nil
	}
	// The stream lives as long as it has watches' worth of use; it is not
	// tied to any one watch's context.
	ctx, cancel := context.WithCancel(context.Background())
	st, err := m.wc.WatchMany(ctx)
	if err != nil {
		cancel()
		return nil, 0, err
	}
	s := &session{stream: st, cancelStream: cancel, watches: map[int64]*watchStream{}, broken: make(chan struct{})}
	go s.receive()
	m.sessions = append(m.sessions, s)
	return s, id, nil
}

// session is one WatchMany stream and its watches.
type session struct {
	stream       grpc.BidiStreamingClient[watchv1.WatchManyRequest, watchv1.WatchManyResponse]
	cancelStream context.CancelFunc

	sendMu sync.Mutex // serializes Send; taken before mu

	mu      sync.Mutex
	watches map[int64]*watchStream
	err     error // set once the stream broke

	broken chan struct{} // closed once err is set
}

// open registers w and asks watchfanout for it. Registering and sending
// happen under sendMu, as cancel's forgetting and sending do, so
// watchfanout never sees a watch's cancel before its open.
func (s *session) open(w *watchStream, req *watchv1.WatchRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.watches[w.id] = w
	s.mu.Unlock()
	err := s.stream.Send(&watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Open{Open: &watchv1.WatchOpen{Id: w.id, Request: req, Window: int64(w.window), Shared: true}}})
	if err != nil {
		s.forget(w.id)
		// Send reports io.EOF when the stream broke; its status comes from
		// Recv, which the receiver has seen or is about to see (the stream
		// is over, so Recv returns). Waiting for it matters: a watchfanout
		// that does not know WatchMany ends the stream UNIMPLEMENTED, which
		// makes the caller fall back to Watch, where "broke" would not.
		if errors.Is(err, io.EOF) {
			select {
			case <-s.broken:
			case <-time.After(brokenWait):
			}
			err = s.brokenErr()
		}
		return err
	}
	return nil
}

func (s *session) brokenErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return status.Error(codes.Unavailable, "watchfanout: the watch stream broke")
}

// cancel tells watchfanout to end watch id and forgets it: its remaining
// messages are dropped.
func (s *session) cancel(id int64) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.forget(id) {
		_ = s.stream.Send(&watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Cancel{Cancel: id}})
	}
}

// forget unregisters watch id; false when it was not registered.
func (s *session) forget(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.watches[id]
	delete(s.watches, id)
	return ok
}

// receive delivers each message to its watch until the stream breaks;
// then every watch ends with the stream's error.
func (s *session) receive() {
	for {
		msg, err := s.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "watchfanout: the watch stream ended")
			}
			s.mu.Lock()
			s.err = err
			ws := s.watches
			s.watches = map[int64]*watchStream{}
			s.mu.Unlock()
			close(s.broken)
			for _, w := range ws {
				w.fail(err)
			}
			s.cancelStream()
			return
		}
		s.deliver(msg.GetId(), msg)
		for _, id := range msg.GetAlso() {
			s.deliver(id, msg)
		}
	}
}

// deliver queues msg for watch id, if it is still registered. A message
// naming several watches (also) is queued to each of them as it is: its
// readers only read it.
func (s *session) deliver(id int64, msg *watchv1.WatchManyResponse) {
	s.mu.Lock()
	w := s.watches[id]
	if w != nil && msg.GetEnd() {
		delete(s.watches, id)
	}
	s.mu.Unlock()
	if w == nil {
		return // cancelled
	}
	if !w.push(msg) {
		// The reader fell behind: end its watch (never drop a message
		// and go on, never block the stream's other watches).
		if !msg.GetEnd() {
			s.cancel(id)
		}
		w.fail(ErrTooSlow)
	}
}

// watchStream is one watch of a session, as a Watch stream.
type watchStream struct {
	ctx     context.Context
	s       *session
	id      int64
	window  int
	stopCtx ctxhook.Stop

	// The messages waiting for the reader, in order, from queued[head]:
	// at most the window, the one message a watch may send over it as it
	// ends, and the end. The array grows with what waits and is dropped
	// once drained when it grew past keptQueue, so an idle watch holds
	// (almost) none. ready, made when the reader is about to wait in
	// Recv and dropped when it parks (a parked reader is woken by wake
	// instead), has a token once a message was queued, or the watch
	// failed, since the reader last looked.
	qmu    sync.Mutex
	queued []*watchv1.WatchManyResponse
	head   int
	ready  chan struct{}
	// wake, set by Park, is called once by the next push, fail or end of
	// the context, in place of a reader waiting in Recv.
	wake func()
	// failErr, set once by fail, ends the watch ahead of any queued
	// message.
	failErr error
	// ctxDone is set by the context's AfterFunc (ctxEnded): Recv has the
	// context's error to return.
	ctxDone bool

	// Read by the reader only.
	endErr error
	ended  bool
	read   int // messages read since the last credit grant
}

// keptQueue is the capacity of a drained queue's array kept for the next
// messages; a larger one (a burst) is dropped.
const keptQueue = 8

// push queues msg for the reader; false when the queue is full (the reader
// fell behind).
func (w *watchStream) push(msg *watchv1.WatchManyResponse) bool {
	w.qmu.Lock()
	if len(w.queued)-w.head >= w.window+2 {
		w.qmu.Unlock()
		return false
	}
	w.queued = append(w.queued, msg)
	wake, ready := w.wake, w.ready
	w.wake = nil
	w.qmu.Unlock()
	signal(wake, ready)
	return true
}

// Park arranges for wake to be called, once, when Recv has something to
// return: a message, the watch's failure or the end of its context. It
// reports false, keeping no wake-up, when Recv may have something now.
// A reader that parks does not wait in Recv: it calls Recv once woken.
// wake runs on the goroutine that delivers (the stream's receiver, or the
// context's AfterFunc) and must not block.
func (w *watchStream) Park(wake func()) bool {
	if w.ended {
		return false
	}
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if w.head < len(w.queued) || w.failErr != nil || w.ctxDone {
		return false
	}
	// push, fail and the context's AfterFunc (ctxEnded) look for a
	// wake-up under qmu: each saw none only if it had happened by the
	// checks above. (ctxDone rather than ctx.Err: a parked watch's
	// context is not walked for every message.)
	w.wake = wake
	w.ready = nil
	return true
}

// ctxEnded ends the watch at its context's end (the context's AfterFunc):
// watchfanout is told, Recv and Park see ctxDone, and a parked reader is
// woken.
func (w *watchStream) ctxEnded() {
	w.s.cancel(w.id)
	w.qmu.Lock()
	w.ctxDone = true
	wake := w.wake
	w.wake = nil
	w.qmu.Unlock()
	if wake != nil {
		wake()
	}
}

// signal tells the reader something came: wake, the wake-up a parked
// reader left, or a token in ready (if any) for one that may wait in
// Recv; both as they were under qmu.
func signal(wake func(), ready chan struct{}) {
	if wake != nil {
		wake()
		return
	}
	select {
	case ready <- struct{}{}:
	default: // the reader has a token already, or waits for none
	}
}

// pop returns the error the watch failed with, or else the next queued
// message, or else the channel to wait on for either.
func (w *watchStream) pop() (*watchv1.WatchManyResponse, chan struct{}, error) {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if w.failErr != nil {
		return nil, nil, w.failErr
	}
	if w.head == len(w.queued) {
		if w.ready == nil {
			w.ready = make(chan struct{}, 1)
		}
		return nil, w.ready, nil
	}
	msg := w.queued[w.head]
	w.queued[w.head] = nil
	w.head++
	if w.head == len(w.queued) {
		w.head = 0
		if cap(w.queued) > keptQueue {
			w.queued = nil
		} else {
			w.queued = w.queued[:0]
		}
	}
	return msg, nil, nil
}

// fail ends the watch with err, ahead of any queued messages.
func (w *watchStream) fail(err error) {
	w.qmu.Lock()
	if w.failErr == nil {
		w.failErr = err
	}
	wake, ready := w.wake, w.ready
	w.wake = nil
	w.qmu.Unlock()
	signal(wake, ready)
}

// Recv returns the watch's next message, io.EOF after a normal end, or
// the error it ended with.
func (w *watchStream) Recv() (*watchv1.WatchResponse, error) {
	if w.ended {
		return nil, w.endErr
	}
	for {
		msg, ready, err := w.pop()
		if err != nil {
			return w.end(err)
		}
		if msg != nil {
			return w.deliver(msg)
		}
		select {
		case <-ready:
		case <-w.ctx.Done():
			return w.end(status.FromContextError(w.ctx.Err()).Err())
		}
	}
}

// deliver returns a message of watchfanout to the reader: its response,
// or how the watch ended after an end message.
func (w *watchStream) deliver(msg *watchv1.WatchManyResponse) (*watchv1.WatchResponse, error) {
	if !msg.GetEnd() {
		w.credit()
		return msg.GetResponse(), nil
	}
	w.endErr = io.EOF
	if b := msg.GetStatus(); len(b) > 0 {
		st := &spb.Status{}
		if err := proto.Unmarshal(b, st); err != nil {
			w.endErr = status.Errorf(codes.Internal, "watchfanout: bad end status: %v", err)
		} else {
			w.endErr = status.ErrorProto(st)
		}
	}
	w.ended = true
	w.stopCtx.Stop()
	if r := msg.GetResponse(); r != nil {
		return r, nil
	}
	return nil, w.endErr
}

// credit counts a message read and grants watchfanout a quarter window of
// credit once that many were read.
func (w *watchStream) credit() {
	w.read++
	if w.read < max(1, w.window/4) {
		return
	}
	n := w.read
	w.read = 0
	w.s.sendMu.Lock()
	defer w.s.sendMu.Unlock()
	_ = w.s.stream.Send(&watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Credit{Credit: &watchv1.WatchCredit{Id: w.id, Messages: int64(n)}}})
}

func (w *watchStream) end(err error) (*watchv1.WatchResponse, error) {
	w.ended, w.endErr = true, err
	if w.stopCtx.Stop() {
		w.s.cancel(w.id)
	}
	return nil, err
}

// Close ends the watch for its reader, as the end of its context would:
// watchfanout is told to end it and its remaining messages are dropped.
// A reader that closes the stream reads it no more. Close spares a
// caller that must end the watch before its context ends a context of
// the watch's own.
func (w *watchStream) Close() {
	if w.stopCtx.Stop() {
		w.s.cancel(w.id)
	}
	w.ended, w.endErr = true, errClosed
}

// errClosed is what Recv returns after Close.
var errClosed = status.Error(codes.Canceled, "watchmux: the watch was closed")

// RecvMsg is Recv into m, a *watchv1.WatchResponse.
func (w *watchStream) RecvMsg(m any) error {
	resp, err := w.Recv()
	if err != nil {
		return err
	}
	proto.Reset(m.(proto.Message))
	proto.Merge(m.(proto.Message), resp)
	return nil
}

// Header is empty: the watch has no headers of its own.
func (w *watchStream) Header() (metadata.MD, error) { return metadata.MD{}, nil }

// Trailer is empty.
func (w *watchStream) Trailer() metadata.MD { return metadata.MD{} }

// CloseSend does nothing: the watch's request was sent when it opened.
func (w *watchStream) CloseSend() error { return nil }

// Context is the watch's context.
func (w *watchStream) Context() context.Context { return w.ctx }

// SendMsg is not supported: a watch takes one request.
func (w *watchStream) SendMsg(any) error {
	return status.Error(codes.Unimplemented, "watchfanout: a watch stream takes no messages")
}
