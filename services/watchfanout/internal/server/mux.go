package server

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec"
)

// errSendClosed: the stream's handler returned; nothing may be sent.
var errSendClosed = errors.New("watchfanout: the stream has ended")

// emitFunc sends one message of watch id: resp (may be nil) and, with end,
// the end of the watch and the error it ended with (nil: OK).
type emitFunc func(id int64, resp *watchv1.WatchResponse, end bool, endErr error) error

// mux serves the watches of one gRPC stream — one for Watch, any number
// for WatchMany — and owns the stream's sends.
//
// A watch costs no goroutine while it has nothing to send: the cache calls
// its OnPending, which puts it on ready; the stream's one sender (serve)
// takes ready watches in turn and drains them. Only a watch being set up
// (waiting for the cache, sending initial events) runs on a goroutine of
// its own, which ends once it is live.
//
// Lock order: sendMu, then mu. Sends are serialized by sendMu; after
// closeSends nothing is sent, so no goroutine touches the stream once its
// handler returned.
type mux struct {
	s    *Server
	ctx  context.Context // the stream's
	emit emitFunc        // called with sendMu held
	// sendMsg is the stream's SendMsg, for batches encoded by package
	// batchcodec (the server's gRPC codec must be batchcodec.Codec);
	// called with sendMu held.
	sendMsg func(any) error
	many    bool // batches are WatchManyResponses (else WatchResponses)

	sendMu sync.Mutex
	closed bool // guarded by sendMu

	mu      sync.Mutex
	watches map[int64]*watch
	// closing is set by stopAll: the stream is ending, and a watch it
	// still receives is not opened.
	closing bool
	ready   []*watch
	wake    chan struct{} // capacity 1: ready grew
	live    sync.WaitGroup

	// Used by the sender (serve) only: scratch of shareBatch.
	peers []*watch
	also  []int64
}

func newMux(s *Server, ctx context.Context, many bool, emit emitFunc, sendMsg func(any) error) *mux {
	return &mux{s: s, ctx: ctx, emit: emit, sendMsg: sendMsg, many: many, watches: map[int64]*watch{}, wake: make(chan struct{}, 1)}
}

// send sends one message of a watch; errSendClosed after closeSends.
func (m *mux) send(id int64, resp *watchv1.WatchResponse, end bool, endErr error) error {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	if m.closed {
		return errSendClosed
	}
	return m.emit(id, resp, end, endErr)
}

// sendEncoded sends a batch encoded by package batchcodec; errSendClosed after
// closeSends. On success gRPC owns msg's buffer.
func (m *mux) sendEncoded(msg *batchcodec.Message) error {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	if m.closed {
		return errSendClosed
	}
	return m.sendMsg(msg)
}

// closeSends makes every later send fail; it waits for a send in progress.
func (m *mux) closeSends() {
	m.sendMu.Lock()
	m.closed = true
	m.sendMu.Unlock()
}

// open starts watch id with a credit window (0: none), whose batches may
// be shared with other watches (shared, WatchMany only); false when the
// id is in use, a nil watch when the stream is ending (after stopAll).
func (m *mux) open(id int64, req *watchv1.WatchRequest, window int64, shared bool, done chan struct{}) (*watch, bool) {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil, true
	}
	if _, dup := m.watches[id]; dup {
		m.mu.Unlock()
		return nil, false
	}
	w := newWatch(m, id, req, window, shared, done)
	m.watches[id] = w
	m.live.Add(1)
	m.mu.Unlock()
	go w.start()
	return w, true
}

// cancel stops watch id, if it is open.
func (m *mux) cancel(id int64) {
	m.mu.Lock()
	w := m.watches[id]
	m.mu.Unlock()
	if w != nil {
		w.stop(stopGone)
	}
}

// credit grants watch id n more messages, if it is open.
func (m *mux) credit(id, n int64) {
	m.mu.Lock()
	w := m.watches[id]
	m.mu.Unlock()
	if w != nil {
		w.grant(n)
	}
}

// stopAll stops every watch (the stream is ending).
func (m *mux) stopAll() {
	m.mu.Lock()
	m.closing = true
	ws := make([]*watch, 0, len(m.watches))
	for _, w := range m.watches {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	for _, w := range ws {
		w.stop(stopGone)
	}
}

// ended forgets a finished watch.
func (m *mux) ended(w *watch) {
	m.mu.Lock()
	delete(m.watches, w.id)
	m.mu.Unlock()
	m.live.Done()
}

// schedule puts w on ready. Called only by the poke that set w.sched.
func (m *mux) schedule(w *watch) {
	m.mu.Lock()
	m.ready = append(m.ready, w)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// serve drains ready watches, oldest first, until quit is closed.
func (m *mux) serve(quit <-chan struct{}) {
	for {
		m.mu.Lock()
		if len(m.ready) == 0 {
			m.ready = m.ready[:0]
			m.mu.Unlock()
			select {
			case <-m.wake:
				continue
			case <-quit:
				return
			}
		}
		w := m.ready[0]
		m.ready[0] = nil
		m.ready = m.ready[1:]
		m.mu.Unlock()
		w.drain()
	}
}

// Watch streams one watch's events. Before the stream starts (bad request,
// unknown resource, cache not synced) it fails with a gRPC status carrying
// an api.v1.Status. Then the first message is empty; failures after it
// (410 Expired, 504 for a resourceVersion the cache does not reach in
// time, 429 for a watcher that fell behind) are one ERROR frame, after
// which the stream ends with OK. The stream also ends with OK at the
// timeout and when the service shuts down.
func (s *Server) Watch(req *watchv1.WatchRequest, stream watchv1.WatchService_WatchServer) error {
	var result error
	m := newMux(s, stream.Context(), false, func(_ int64, resp *watchv1.WatchResponse, end bool, endErr error) error {
		if resp != nil {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		if end {
			result = endErr
		}
		return nil
	}, stream.SendMsg)
	done := make(chan struct{})
	w, _ := m.open(0, req, 0, false, done) // HTTP/2 flow control is the watch's
	stop := context.AfterFunc(stream.Context(), func() { w.stop(stopGone) })
	defer stop()
	// The handler is this watch's sender.
	m.serve(done)
	m.closeSends()
	return result
}

// WatchMany serves many watches over one stream (see the proto). The
// stream ends with an error only for a broken request (an id in use, an
// empty op); watches end one by one, each with its own end message.
func (s *Server) WatchMany(stream watchv1.WatchService_WatchManyServer) error {
	m := newMux(s, stream.Context(), true, func(id int64, resp *watchv1.WatchResponse, end bool, endErr error) error {
		out := &watchv1.WatchManyResponse{Id: id, Response: resp, End: end}
		if endErr != nil {
			b, err := proto.Marshal(status.Convert(endErr).Proto())
			if err != nil {
				return err
			}
			out.Status = b
		}
		return stream.Send(out)
	}, stream.SendMsg)
	quit, sent := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sent)
		m.serve(quit)
	}()
	received := make(chan error, 1)
	go func() { received <- m.receive(stream) }()
	var err error
	select {
	case err = <-received:
	case <-s.cfg.Stopping:
		// The service is shutting down: the stream ends with its
		// watches, and the receiver with the stream (its Recv fails once
		// this handler returns; what it still reads is not opened).
	}
	// Every watch ends (ending the stream ends its watches); the sender
	// drains them, then stops.
	m.stopAll()
	m.live.Wait()
	close(quit)
	<-sent
	m.closeSends()
	return err
}

// receive opens and cancels watches as the client asks, until it closes
// its side or goes away (nil) or breaks the protocol.
func (m *mux) receive(stream watchv1.WatchService_WatchManyServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || m.ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch op := req.GetOp().(type) {
		case *watchv1.WatchManyRequest_Open:
			if _, ok := m.open(op.Open.GetId(), op.Open.GetRequest(), op.Open.GetWindow(), op.Open.GetShared(), nil); !ok {
				return status.Errorf(codes.InvalidArgument, "watch id %d is in use", op.Open.GetId())
			}
		case *watchv1.WatchManyRequest_Cancel:
			m.cancel(op.Cancel)
		case *watchv1.WatchManyRequest_Credit:
			m.credit(op.Credit.GetId(), op.Credit.GetMessages())
		default:
			return status.Error(codes.InvalidArgument, "a WatchManyRequest needs open, cancel or credit")
		}
	}
}
