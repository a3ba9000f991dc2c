package server

import (
	"sync"

	"google.golang.org/grpc"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// answers collects a Decide stream's answers for its Decide goroutine,
// the only one that sends them (flush). Decide marks itself busy
// (begin) while it decides the messages received; answers are added
// meanwhile by that goroutine (add) or posted by any other (post: an
// Acquire that waited in its queue, decided elsewhere), and the flush
// that ends the busy spell sends them all. An answer posted while Decide
// is idle signals posted, and Decide flushes. So each answer goes out
// with the next Send without a goroutine of its own, and under load one
// Send (one gRPC message and flush) carries many.
type answers struct {
	stream grpc.BidiStreamingServer[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse]
	batch  bool   // the client takes DecideResponse.answers
	failed func() // called once when a Send fails
	// posted has a token when answers were posted while Decide was idle
	// (capacity 1: a token waiting stands for any number of posts).
	posted chan struct{}
	// mu guards pending, busy and err.
	mu      sync.Mutex
	pending []*flowcontrolv1.DecideResponse
	busy    bool  // between begin and the end of flush
	err     error // the first Send's error; later answers are dropped
	spare   []*flowcontrolv1.DecideResponse
}

func newAnswers(stream grpc.BidiStreamingServer[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse], batch bool, failed func()) *answers {
	return &answers{stream: stream, batch: batch, failed: failed, posted: make(chan struct{}, 1)}
}

// begin marks the Decide goroutine busy: answers posted from now on are
// sent by its next flush, without a signal.
func (a *answers) begin() {
	a.mu.Lock()
	a.busy = true
	a.mu.Unlock()
}

// add queues resp for the next flush; Decide's goroutine only.
func (a *answers) add(resp *flowcontrolv1.DecideResponse) {
	a.mu.Lock()
	a.pending = append(a.pending, resp)
	a.mu.Unlock()
}

// post queues resp from any goroutine; it is sent by the Decide
// goroutine's flush in progress or next, which it signals when that
// goroutine is idle.
func (a *answers) post(resp *flowcontrolv1.DecideResponse) {
	a.mu.Lock()
	a.pending = append(a.pending, resp)
	idle := !a.busy
	a.mu.Unlock()
	if idle {
		select {
		case a.posted <- struct{}{}:
		default: // a token is waiting already
		}
	}
}

// flush sends the queued answers, those posted while it sends included,
// and ends the busy spell; Decide's goroutine only.
func (a *answers) flush() {
	a.mu.Lock()
	for len(a.pending) > 0 && a.err == nil {
		out := a.pending
		a.pending = a.spare[:0]
		a.mu.Unlock()
		err := a.write(out)
		clear(out)
		a.mu.Lock()
		a.spare = out
		if err != nil {
			a.err = err
			a.failed() // nobody would hear the answers
		}
	}
	a.pending = a.pending[:0]
	a.busy = false
	a.mu.Unlock()
}

// write sends out: in one message when the client takes batches.
func (a *answers) write(out []*flowcontrolv1.DecideResponse) error {
	if len(out) > 1 && a.batch {
		return a.stream.Send(&flowcontrolv1.DecideResponse{Answers: out})
	}
	for _, resp := range out {
		if err := a.stream.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

// Err returns the first Send's error, if any.
func (a *answers) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}
