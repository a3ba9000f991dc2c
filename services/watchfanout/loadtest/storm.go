package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
)

// settleRest is how long watchfanout rests after its forced collections
// before the steady RSS is read: the runtime's background scavenger
// returns the pages the collections freed to the OS over a few seconds.
const settleRest = 10 * time.Second

// stormScenario writes O objects, measures watchfanout's steady size, then
// opens W watchers at once with sendInitialEvents=true and reports the
// time until every one has its initial-events-end bookmark and the peak
// memory against the steady size.
//
// "Steady" is the RSS of watchfanout holding the objects and nothing else to
// do, after two forced collections (the heap profile endpoint with gc=1:
// the second also empties the sync.Pools the first only aged) and
// settleRest. Without -metrics it is the RSS 5 s after the writes, which
// depends on whether a collection happened to run. The peak is VmHWM, reset (clear_refs) after the
// steady reading so that the writes' own peak does not count.
func (e *env) stormScenario(ctx context.Context) error {
	o := e.o
	payload := strings.Repeat("x", o.size)
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < o.objects; i += 8 {
				if _, err := e.put(ctx, "storm", fmt.Sprintf("cm-%05d", i), payload); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	fmt.Printf("%d objects of %d B written in %v\n", o.objects, o.size, time.Since(began).Round(time.Millisecond))
	time.Sleep(5 * time.Second)
	unsettled := readProc(o.pid)
	fmt.Printf("5 s after the writes: %s\n", unsettled)
	steady := unsettled
	var steadyHeap heapStats
	if o.metrics != "" {
		for range 2 {
			if err := forceGC(ctx, o.metrics); err != nil {
				return err
			}
		}
		time.Sleep(settleRest)
		steady = readProc(o.pid)
		var err error
		if steadyHeap, err = readHeap(ctx, o.metrics); err != nil {
			return err
		}
		fmt.Printf("steady (2 GCs, %v rest): %s; heap in use %.1f MiB, live %.1f MiB\n", settleRest, steady, mib(steadyHeap.inuse), mib(steadyHeap.alloc))
	}
	if err := resetHWM(o.pid); err != nil {
		fmt.Printf("cannot reset VmHWM (the peak may predate the storm): %v\n", err)
	}
	var synced atomic.Int64
	var bytesIn atomic.Int64
	marker := []byte("k8s.io/initial-events-end")
	began = time.Now()
	var done sync.WaitGroup
	var peak, peakHeap, peakStack atomic.Int64
	sample := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-sample:
				return
			case <-t.C:
				if p := readProc(o.pid); p.rss > peak.Load() {
					peak.Store(p.rss)
				}
				// Heap stats once a second: a scrape makes garbage of
				// its own in watchfanout.
				if o.metrics == "" || n%4 != 0 {
					continue
				}
				if h, err := readHeap(ctx, o.metrics); err == nil {
					if h.inuse > peakHeap.Load() {
						peakHeap.Store(h.inuse)
					}
					if h.stack > peakStack.Load() {
						peakStack.Store(h.stack)
					}
				}
			}
		}
	}()
	var firstErr atomic.Value
	for i := range o.watchers {
		done.Add(1)
		go func() {
			defer done.Done()
			req := &watchv1.WatchRequest{Resource: &watchv1.Resource{Version: "v1", Resource: "configmaps"}, Namespace: "storm",
				SendInitialEvents: ptr(true), ResourceVersionMatch: "NotOlderThan", AllowBookmarks: true}
			cl, err := e.openWatch(ctx, i, req)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			for {
				resp, err := cl.Recv()
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				bytesIn.Add(int64(len(resp.GetFrames())))
				if bytes.Contains(resp.GetFrames(), marker) {
					synced.Add(1)
					return
				}
			}
		}()
	}
	done.Wait()
	close(sample)
	<-sampled
	took := time.Since(began)
	final := readProc(o.pid)
	if err, _ := firstErr.Load().(error); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Printf("first error: %v\n", err)
	}
	fmt.Printf("%d/%d watchers synced (%d objects each) in %v; %.1f MiB of frames (%.0f MiB/s)\n",
		synced.Load(), o.watchers, o.objects, took.Round(time.Millisecond), mib(bytesIn.Load()), mib(bytesIn.Load())/took.Seconds())
	top := max(peak.Load(), final.hwm)
	fmt.Printf("RSS steady %.1f MiB, peak sampled %.1f MiB, VmHWM %.1f MiB: peak/steady %.2f (against the RSS 5 s after the writes: %.2f)\n",
		mib(steady.rss), mib(peak.Load()), mib(final.hwm), float64(top)/float64(steady.rss), float64(top)/float64(unsettled.rss))
	fmt.Printf("watchfanout CPU during the storm: %v\n", (final.cpu - steady.cpu).Round(time.Millisecond))
	if o.metrics != "" {
		if h, err := readHeap(ctx, o.metrics); err == nil {
			fmt.Printf("collections during the storm: %d\n", h.gcs-steadyHeap.gcs)
		}
		fmt.Printf("heap in use: steady %.1f MiB (live %.1f MiB), peak sampled %.1f MiB; stacks: steady %.1f MiB, peak sampled %.1f MiB\n",
			mib(steadyHeap.inuse), mib(steadyHeap.alloc), mib(peakHeap.Load()), mib(steadyHeap.stack), mib(peakStack.Load()))
	}
	return nil
}

// forceGC makes watchfanout collect: its heap profile endpoint with gc=1
// runs runtime.GC before it writes the profile.
func forceGC(ctx context.Context, addr string) error {
	body, err := get(ctx, "http://"+addr+"/debug/pprof/heap?gc=1")
	if err != nil {
		return fmt.Errorf("force a GC of watchfanout (run it with --pprof): %w", err)
	}
	_, _ = io.Copy(io.Discard, body)
	return body.Close()
}

// heapStats is the heap of watchfanout in bytes, from its metrics.
type heapStats struct {
	inuse int64 // spans in use (go_memstats_heap_inuse_bytes)
	alloc int64 // allocated objects, live right after a collection (go_memstats_heap_alloc_bytes)
	stack int64 // goroutine stacks (go_memstats_stack_inuse_bytes)
	gcs   int64 // collections so far (go_gc_duration_seconds_count)
}

func readHeap(ctx context.Context, addr string) (heapStats, error) {
	body, err := get(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return heapStats{}, err
	}
	defer body.Close()
	var h heapStats
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "go_memstats_heap_inuse_bytes":
			dst = &h.inuse
		case "go_memstats_heap_alloc_bytes":
			dst = &h.alloc
		case "go_memstats_stack_inuse_bytes":
			dst = &h.stack
		case "go_gc_duration_seconds_count":
			dst = &h.gcs
		default:
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return heapStats{}, fmt.Errorf("metric %s: %w", name, err)
		}
		*dst = int64(f)
	}
	return h, sc.Err()
}

func get(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// Uncompressed: watchfanout's gzip writer for a scrape is ~1 MiB of
	// garbage (and live while it writes), once a second during the storm
	// the instrument would weigh on what it measures.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// resetHWM resets the process's peak RSS (VmHWM) to its current RSS.
func resetHWM(pid int) error {
	if pid == 0 {
		return nil
	}
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}
