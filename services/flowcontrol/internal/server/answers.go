package server

import (
	"runtime"
	"sync"

	"google.golang.org/grpc"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// answers sends a Decide stream's answers. Whoever adds an answer while
// no Send is in progress becomes the sender: it sends what has
// collected, all in one message when the client takes batches, until
// nothing is left. So an answer never waits for a goroutine handoff, and
// under load one Send (one gRPC message and flush) carries many.
type answers struct {
	stream grpc.BidiStreamingServer[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse]
	batch  bool   // the client takes DecideResponse.answers
	failed func() // called once when a Send fails
	// mu guards pending, sending and err.
	mu      sync.Mutex
	pending []*flowcontrolv1.DecideResponse
	sending bool
	err     error // the first Send's error; later answers are dropped
}

// add queues resp without sending it; flush sends it.
func (a *answers) add(resp *flowcontrolv1.DecideResponse) {
	a.mu.Lock()
	a.pending = append(a.pending, resp)
	a.mu.Unlock()
}

// send queues resp and sends the queue.
func (a *answers) send(resp *flowcontrolv1.DecideResponse) {
	a.add(resp)
	a.flush()
}

// flush sends the queued answers unless another caller is sending them.
func (a *answers) flush() {
	a.mu.Lock()
	if a.sending {
		a.mu.Unlock()
		return
	}
	a.sending = true
	a.mu.Unlock()
	// Let the goroutines ready to run (other calls finishing) add their
	// answers first, so that one Send carries them all.
	runtime.Gosched()
	a.mu.Lock()
	var spare []*flowcontrolv1.DecideResponse
	for len(a.pending) > 0 && a.err == nil {
		out := a.pending
		a.pending = spare[:0]
		a.mu.Unlock()
		err := a.write(out)
		clear(out)
		spare = out
		a.mu.Lock()
		if err != nil {
			a.err = err
			a.failed() // nobody would hear the answers
		}
	}
	a.pending = a.pending[:0]
	a.sending = false
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
