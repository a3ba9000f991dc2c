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
	// recycle takes back an Acquire's messages once its answer is sent.
	recycle func(*decideAcquire)
	// posted has a token when answers were posted while Decide was idle
	// (capacity 1: a token waiting stands for any number of posts).
	posted chan struct{}
	// mu guards pending, busy and err.
	mu      sync.Mutex
	pending []*flowcontrolv1.DecideResponse
	// owners are the Acquires whose messages the pending answers are,
	// recycled once sent (or dropped).
	owners []*decideAcquire
	busy   bool  // between begin and the end of flush
	err    error // the first Send's error; later answers are dropped
	spare  []*flowcontrolv1.DecideResponse
	// spareOwners is owners' other buffer.
	spareOwners []*decideAcquire
}

func newAnswers(stream grpc.BidiStreamingServer[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse], batch bool, failed func(), recycle func(*decideAcquire)) *answers {
	return &answers{stream: stream, batch: batch, failed: failed, recycle: recycle, posted: make(chan struct{}, 1)}
}

// begin marks the Decide goroutine busy: answers posted from now on are
// sent by its next flush, without a signal.
func (a *answers) begin() {
	a.mu.Lock()
	a.busy = true
	a.mu.Unlock()
}

// add queues resp for the next flush; Decide's goroutine only. owner,
// if not nil, holds resp's messages and is recycled once resp is sent.
func (a *answers) add(resp *flowcontrolv1.DecideResponse, owner *decideAcquire) {
	a.mu.Lock()
	a.pending = append(a.pending, resp)
	if owner != nil {
		a.owners = append(a.owners, owner)
	}
	a.mu.Unlock()
}

// post queues resp from any goroutine; it is sent by the Decide
// goroutine's flush in progress or next, which it signals when that
// goroutine is idle. owner is as add's.
func (a *answers) post(resp *flowcontrolv1.DecideResponse, owner *decideAcquire) {
	a.mu.Lock()
	a.pending = append(a.pending, resp)
	if owner != nil {
		a.owners = append(a.owners, owner)
	}
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
		out, owners := a.pending, a.owners
		a.pending, a.owners = a.spare[:0], a.spareOwners[:0]
		a.mu.Unlock()
		err := a.write(out)
		clear(out)
		// Send has encoded the answers: their messages may be reused.
		for _, o := range owners {
			a.recycle(o)
		}
		clear(owners)
		a.mu.Lock()
		a.spare, a.spareOwners = out, owners
		if err != nil {
			a.err = err
			a.failed() // nobody would hear the answers
		}
	}
	a.pending = a.pending[:0]
	clear(a.owners) // dropped after a failed Send: left to the GC
	a.owners = a.owners[:0]
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
