package cache

import (
	"context"
	"sync"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// ConsistentRev returns the store's current revision, read linearizably:
// a read served from the cache once it reaches that revision is
// consistent. Concurrent callers share store reads (each waits for a read
// that started after it called).
func (c *Cache) ConsistentRev(ctx context.Context) (int64, error) { return c.fetch.get(ctx) }

// ConsistentRevFunc is ConsistentRev without a caller waiting: fn gets
// the revision (or the error) once the read it joined is done. fn runs on
// the cache's goroutine for that read, one caller after another, so it
// must not block. The read is bounded (10s); fn is always called.
//
// It serves the watches of a relist storm, thousands of which ask for the
// consistent revision at once: a goroutine each, waiting, would hold its
// stack and leave a goroutine descriptor the runtime never frees.
func (c *Cache) ConsistentRevFunc(fn func(int64, error)) { c.fetch.getFunc(fn) }

// revFetcher reads the store's current revision linearizably, sharing one
// read among the callers that arrived before it started.
type revFetcher struct {
	// read reads the revision: Options.ConsistentRevision, or a
	// linearizable Range over the store connection (rangeRev).
	read func(context.Context) (int64, error)

	mu       sync.Mutex
	inflight bool
	next     *revCall
}

type revCall struct {
	done chan struct{}
	rev  int64
	err  error
	// fns are called once done (ConsistentRevFunc); appended under the
	// fetcher's mu while the call is next, read by its read's goroutine.
	fns []func(int64, error)
}

// nextLocked returns the call that the next read will answer.
func (f *revFetcher) nextLocked() *revCall {
	if f.next == nil {
		f.next = &revCall{done: make(chan struct{})}
	}
	return f.next
}

func (f *revFetcher) getFunc(fn func(int64, error)) {
	f.mu.Lock()
	call := f.nextLocked()
	call.fns = append(call.fns, fn)
	if !f.inflight {
		f.startLocked()
	}
	f.mu.Unlock()
}

func (f *revFetcher) get(ctx context.Context) (int64, error) {
	f.mu.Lock()
	call := f.nextLocked()
	if !f.inflight {
		f.startLocked()
	}
	f.mu.Unlock()
	select {
	case <-call.done:
		return call.rev, call.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (f *revFetcher) startLocked() {
	call := f.next
	f.next, f.inflight = nil, true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		call.rev, call.err = f.read(ctx)
		f.mu.Lock()
		f.inflight = false
		if f.next != nil {
			f.startLocked()
		}
		f.mu.Unlock()
		close(call.done)
		for i, fn := range call.fns {
			call.fns[i] = nil
			fn(call.rev, call.err)
		}
	}()
}

// rangeRev reads the store's current revision linearizably over kv: the
// header of a Range.
func rangeRev(kv storev1.KVServiceClient) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		resp, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte(Prefix)})
		return resp.GetHeader().GetRevision(), err
	}
}
