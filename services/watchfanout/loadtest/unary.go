package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
)

// unaryScenario measures the CPU each process spends per unary call: first
// o.concurrency callers of the store's serializable Range of one object,
// then as many of watchfanout's Get of the same object ("0": from the
// cache, no consistency round to the store), each for o.duration. CPU is
// user + system time of -store-pid and -pid over the phase, divided by the
// calls completed in it; both processes are read in both phases, since a
// Get may still cost the store (it should not: "0" is served from the
// cache).
func (e *env) unaryScenario(ctx context.Context) error {
	o := e.o
	payload := fmt.Sprintf("%0*d", o.size, 0)
	if _, err := e.put(ctx, "unary", "cm-0", payload); err != nil {
		return err
	}
	key := []byte(e.cms.Key("unary", "cm-0"))
	fanout := make([]watchv1.WatchServiceClient, len(e.conns))
	for i := range e.conns {
		fanout[i] = e.client(i)
	}
	phases := []struct {
		name string
		call func(ctx context.Context, worker int) error
	}{
		{"store Range (serializable)", func(ctx context.Context, _ int) error {
			resp, err := e.kv.Range(ctx, &storev1.RangeRequest{Key: key, Serializable: true})
			if err == nil && len(resp.GetKvs()) != 1 {
				err = fmt.Errorf("range: %d keys, want 1", len(resp.GetKvs()))
			}
			return err
		}},
		{"watchfanout Get (resourceVersion=0)", func(ctx context.Context, worker int) error {
			_, err := fanout[worker%len(fanout)].Get(ctx, &watchv1.GetRequest{
				Resource: &watchv1.Resource{Version: "v1", Resource: "configmaps"}, Namespace: "unary", Name: "cm-0",
				ResourceVersion: "0", Encoding: e.encoding(),
			})
			return err
		}},
	}
	for _, ph := range phases {
		// A short warm-up, so that connections and pools are in place.
		if err := e.callFor(ctx, time.Second, ph.call, nil); err != nil {
			return fmt.Errorf("%s: %w", ph.name, err)
		}
		fanBefore, storeBefore := readProc(o.pid), readProc(o.storePid)
		began := time.Now()
		var calls atomic.Int64
		if err := e.callFor(ctx, o.duration, ph.call, &calls); err != nil {
			return fmt.Errorf("%s: %w", ph.name, err)
		}
		took := time.Since(began)
		fanAfter, storeAfter := readProc(o.pid), readProc(o.storePid)
		n := calls.Load()
		perCall := func(before, after proc) string {
			if n == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f µs/call", float64((after.cpu-before.cpu).Microseconds())/float64(n))
		}
		fmt.Printf("%s: %d calls, %.0f/s, %d callers; store %s (CPU %v), watchfanout %s (CPU %v)\n",
			ph.name, n, float64(n)/took.Seconds(), o.concurrency,
			perCall(storeBefore, storeAfter), (storeAfter.cpu - storeBefore.cpu).Round(time.Millisecond),
			perCall(fanBefore, fanAfter), (fanAfter.cpu - fanBefore.cpu).Round(time.Millisecond))
	}
	return nil
}

// callFor runs o.concurrency callers of call for d, counting completed
// calls in n (when not nil); the first error stops them and is returned.
// Calls run under ctx itself, not a deadline of d, so that the calls in
// flight at the end complete instead of failing.
func (e *env) callFor(ctx context.Context, d time.Duration, call func(context.Context, int) error, n *atomic.Int64) error {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	var failed atomic.Bool
	errs := make(chan error, e.o.concurrency)
	for w := range e.o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() && time.Now().Before(end) {
				if err := call(ctx, w); err != nil {
					failed.Store(true)
					errs <- err
					return
				}
				if n != nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
