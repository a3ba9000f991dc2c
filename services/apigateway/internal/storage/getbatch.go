package storage

import (
	"context"
	"errors"
	"sync"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// getBatcher sends the consistent reads of single keys that arrive while
// one is in flight to the store as one transaction that only reads, which
// the store serves like a linearizable Range (one read barrier, one
// snapshot) without a raft entry.
//
// A read that finds none in flight is sent alone, at once, so one client
// sees no added latency. Reads that arrive meanwhile wait for it and then
// go together: under load the batches grow by themselves, and each read
// pays a share of one store round trip instead of a whole one (a gRPC
// call costs both processes tens of microseconds of CPU, more than the
// store's lookup of the key).
//
// Every read in a batch is linearizable: it was issued before the batch
// was sent, and the store's read barrier comes after that.
type getBatcher struct {
	kv storev1.KVServiceClient

	mu sync.Mutex
	// busy is true while a read or a batch is in flight; guarded by mu.
	busy bool
	// waiting are the reads that arrived while busy, in order; guarded by
	// mu.
	waiting []*batchedGet
}

// batchedGet is one read waiting for a batch.
type batchedGet struct {
	ctx  context.Context
	key  []byte
	done chan struct{}
	// resp and err are set before done is closed.
	resp *storev1.RangeResponse
	err  error
}

// errBatchShape reports a store answer that does not match its batch.
var errBatchShape = errors.New("storage: the store answered a batch of reads with another number of results")

// maxBatch bounds the keys of one transaction.
const maxBatch = 128

// batchTimeout bounds a batch whose readers set no deadline.
const batchTimeout = time.Minute

// get reads key, consistently (a linearizable read at the newest
// revision).
func (b *getBatcher) get(ctx context.Context, key []byte) (*storev1.RangeResponse, error) {
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		resp, err := b.kv.Range(ctx, &storev1.RangeRequest{Key: key})
		b.next()
		return resp, err
	}
	g := &batchedGet{ctx: ctx, key: key, done: make(chan struct{})}
	b.waiting = append(b.waiting, g)
	b.mu.Unlock()
	select {
	case <-g.done:
		return g.resp, g.err
	case <-ctx.Done():
		// The batch may still carry the read; its result is dropped.
		return nil, ctx.Err()
	}
}

// next sends the reads that waited, or marks nothing in flight.
func (b *getBatcher) next() {
	b.mu.Lock()
	if len(b.waiting) == 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	n := min(len(b.waiting), maxBatch)
	batch := b.waiting[:n:n]
	b.waiting = append([]*batchedGet(nil), b.waiting[n:]...)
	b.mu.Unlock()
	go b.send(batch)
}

// send reads batch in one transaction, hands each read its result, and
// goes on with the next batch.
func (b *getBatcher) send(batch []*batchedGet) {
	defer b.next()
	live := batch[:0]
	for _, g := range batch {
		if g.ctx.Err() == nil {
			live = append(live, g)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	if len(live) == 1 {
		g := live[0]
		g.resp, g.err = b.kv.Range(ctx, &storev1.RangeRequest{Key: g.key})
		close(g.done)
		return
	}
	req := &storev1.TxnRequest{Success: make([]*storev1.RequestOp, len(live))}
	for i, g := range live {
		req.Success[i] = &storev1.RequestOp{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: g.key}}}
	}
	resp, err := b.kv.Txn(ctx, req)
	if err == nil && len(resp.GetResponses()) != len(live) {
		err = errBatchShape
	}
	for i, g := range live {
		if err != nil {
			g.err = err
		} else {
			g.resp = resp.GetResponses()[i].GetResponseRange()
			// Every range of the transaction read at its revision.
			g.resp.Header = resp.GetHeader()
		}
		close(g.done)
	}
}

// batchContext is the context of a batch: not canceled when one reader
// gives up (the others still wait), and ending at the latest deadline of
// its readers, or after batchTimeout if one has none. It keeps the first
// reader's values (trace context).
func batchContext(batch []*batchedGet) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(batchTimeout)
	latest := time.Time{}
	for _, g := range batch {
		d, ok := g.ctx.Deadline()
		if !ok {
			latest = deadline
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if latest.After(deadline) {
		latest = deadline
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
