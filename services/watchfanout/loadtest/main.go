// Command loadtest drives a watchfanout replica over gRPC, writing to its
// store directly (the gateway's key layout and stored encoding), and
// reports delivery delays, memory and CPU. Run the store and watchfanout
// as their own processes and pass watchfanout's pid so its RSS and CPU
// are read from /proc (see docs/benchmarks-watchfanout.md).
//
//	fanout: W watchers of one collection, R writes/s of S-byte objects:
//	        p50/p99/max delay from the write (Txn sent, and Txn acknowledged)
//	        to delivery.
//	idle:   W idle watchers over N namespaces: RSS delta per watcher, CPU at
//	        rest.
//	unary:  C concurrent callers of the store's serializable Range, then
//	        of watchfanout's Get, each for the duration: calls per second
//	        and CPU per call of the store (-store-pid) and watchfanout
//	        (-pid) processes.
//	storm:  O objects, then W watchers opened at once with
//	        sendInitialEvents=true: time until every watcher has its
//	        initial-events-end bookmark, peak RSS (VmHWM, reset before the
//	        storm) against the steady RSS: the RSS once watchfanout, holding
//	        the objects, has been collected twice (-metrics) and has rested
//	        (see stormScenario).
//
// Every phase is bounded in time.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/watchmux"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
)

type options struct {
	store, fanout, scenario string
	pid, storePid           int
	concurrency             int
	watchers, namespaces    int
	objects, size           int
	rate                    float64
	duration, timeout       time.Duration
	conns                   int
	mux                     bool
	api, dataDir            string
	proto                   bool
	metrics                 string
}

func main() {
	var o options
	flag.StringVar(&o.store, "store", "127.0.0.1:2479", "store gRPC address")
	flag.StringVar(&o.fanout, "fanout", "127.0.0.1:7004", "watchfanout gRPC address")
	flag.StringVar(&o.scenario, "scenario", "fanout", "fanout, idle, unary or storm")
	flag.IntVar(&o.pid, "pid", 0, "watchfanout pid, for RSS and CPU from /proc")
	flag.IntVar(&o.storePid, "store-pid", 0, "store pid, for its CPU from /proc (fanout, unary)")
	flag.IntVar(&o.concurrency, "concurrency", 4, "concurrent callers (unary)")
	flag.IntVar(&o.watchers, "watchers", 1000, "watchers")
	flag.IntVar(&o.namespaces, "namespaces", 1000, "namespaces (idle)")
	flag.IntVar(&o.objects, "objects", 10000, "objects (storm)")
	flag.IntVar(&o.size, "size", 1024, "object data size in bytes")
	flag.Float64Var(&o.rate, "rate", 100, "writes per second (fanout)")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "measurement time (fanout, idle at rest)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound of the whole run")
	flag.IntVar(&o.conns, "conns", 16, "client connections the watchers share")
	flag.BoolVar(&o.proto, "protobuf", false, "watch in protobuf")
	flag.StringVar(&o.api, "api", "", "fanout: watch through the gateway's REST API at this URL (e.g. https://127.0.0.1:6443 of the all-in-one, whose --store address -store must be) instead of watchfanout over gRPC")
	flag.StringVar(&o.dataDir, "data-dir", ".meridian", "with -api: the all-in-one's data dir (its pki/ gives the admin's certificate for the API and the gateway's for the store)")
	flag.StringVar(&o.metrics, "metrics", "127.0.0.1:9094", "storm: watchfanout's --metrics-listen address, run with --pprof (its heap profile endpoint forces the collections before the steady size; its metrics give heap in use); empty: neither")
	flag.BoolVar(&o.mux, "mux", false, "multiplex the watches over WatchMany streams (as the gateway does) instead of a Watch stream each")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

type env struct {
	o     options
	kv    storev1.KVServiceClient
	conns []*grpc.ClientConn
	muxes []*watchmux.Mux // per connection, with -mux
	// apiTLS, with -api, is the all-in-one's admin client certificate.
	apiTLS *tls.Config
	codec  *codec.Codec
	cms    *registry.Resource
}

func run(ctx context.Context, o options) error {
	var apiTLS, storeTLS *tls.Config
	if o.api != "" {
		var err error
		if apiTLS, storeTLS, err = allInOneTLS(o.dataDir); err != nil {
			return err
		}
	}
	e := &env{o: o, apiTLS: apiTLS}
	sc, err := grpcclient.Dial(o.store, storeTLS)
	if err != nil {
		return err
	}
	defer sc.Close()
	e.kv = storev1.NewKVServiceClient(sc)
	for range o.conns {
		c, err := grpcclient.Dial(o.fanout, nil)
		if err != nil {
			return err
		}
		defer c.Close()
		e.conns = append(e.conns, c)
		e.muxes = append(e.muxes, watchmux.New(watchv1.NewWatchServiceClient(c), watchmux.Options{}))
	}
	if e.codec, err = codec.New(); err != nil {
		return err
	}
	e.cms, _ = registry.New(registry.Core()...).Lookup(corev1.SchemeGroupVersion.WithResource("configmaps"))
	fmt.Printf("scenario=%s watchers=%d gomaxprocs-host=%d\n", o.scenario, o.watchers, numCPU())
	switch o.scenario {
	case "fanout":
		return e.fanoutScenario(ctx)
	case "idle":
		return e.idleScenario(ctx)
	case "storm":
		return e.stormScenario(ctx)
	case "unary":
		return e.unaryScenario(ctx)
	}
	return fmt.Errorf("unknown scenario %q", o.scenario)
}

func (e *env) client(i int) watchv1.WatchServiceClient {
	return watchv1.NewWatchServiceClient(e.conns[i%len(e.conns)])
}

func (e *env) encoding() watchv1.Encoding {
	if e.o.proto {
		return watchv1.Encoding_ENCODING_PROTOBUF
	}
	return watchv1.Encoding_ENCODING_JSON
}

func (e *env) put(ctx context.Context, ns, name string, data string) (int64, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"d": data}}
	val, err := e.codec.EncodeStorage(cm)
	if err != nil {
		return 0, err
	}
	resp, err := e.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(e.cms.Key(ns, name)), Value: val}}}}})
	if err != nil {
		return 0, err
	}
	return resp.GetHeader().GetRevision(), nil
}

// currentRev reads the store's revision.
func (e *env) currentRev(ctx context.Context) (int64, error) {
	resp, err := e.kv.Range(ctx, &storev1.RangeRequest{Key: []byte("/registry/")})
	if err != nil {
		return 0, err
	}
	return resp.GetHeader().GetRevision(), nil
}

// openWatch opens a watch and reads its first (empty) message.
func (e *env) openWatch(ctx context.Context, i int, req *watchv1.WatchRequest) (grpc.ServerStreamingClient[watchv1.WatchResponse], error) {
	req.Encoding = e.encoding()
	var cl grpc.ServerStreamingClient[watchv1.WatchResponse]
	var err error
	if e.o.mux {
		cl, err = e.muxes[i%len(e.muxes)].Watch(ctx, req)
	} else {
		cl, err = e.client(i).Watch(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	if _, err := cl.Recv(); err != nil {
		return nil, err
	}
	return cl, nil
}

func (e *env) fanoutScenario(ctx context.Context) error {
	o := e.o
	start, err := e.currentRev(ctx)
	if err != nil {
		return err
	}
	var acked sync.Map // rev → time the Txn returned
	// firstAt holds, per revision, when the first watcher received it
	// (its message's last event), for the delivery against the Txn's own
	// answer per write: either may come first.
	var firstAt sync.Map
	var mu sync.Mutex
	var fromSend, fromAck, toAck []time.Duration
	var delivered, errorsSeen atomic.Int64
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	marker := []byte("ts=")
	before, storeBefore := readProc(o.pid), readProc(o.storePid)
	// With -api, the watchers share o.conns HTTP/2 connections (client-go
	// keeps one per process; 1,000 watchers are many processes).
	var httpcs []*http.Client
	if o.api != "" {
		for range o.conns {
			httpcs = append(httpcs, apiClient(e.apiTLS))
		}
	}
	for i := range o.watchers {
		// Each watcher reports what it received through consume: frames
		// (JSON or protobuf, undecoded) and the revision of the last one.
		var s, a []time.Duration
		consume := func(f []byte, rev int64, now time.Time) {
			if bytes.Contains(f, []byte(`"ERROR"`)) {
				errorsSeen.Add(1)
			}
			// Each object's data starts with ts=<unix nanos of the send>.
			for {
				i := bytes.Index(f, marker)
				if i < 0 || len(f) < i+3+19 {
					break
				}
				ns, _ := strconv.ParseInt(string(f[i+3:i+3+19]), 10, 64)
				s = append(s, now.Sub(time.Unix(0, ns)))
				delivered.Add(1)
				f = f[i+3+19:]
			}
			if t, ok := acked.Load(rev); ok {
				a = append(a, now.Sub(t.(time.Time)))
			}
			firstAt.LoadOrStore(rev, now)
		}
		report := func() {
			mu.Lock()
			fromSend, fromAck = append(fromSend, s...), append(fromAck, a...)
			mu.Unlock()
		}
		// read consumes the watch's events until it ends.
		var read func()
		if httpcs != nil {
			body, err := httpWatch(wctx, httpcs[i%len(httpcs)], o.api, "load", start, o.proto)
			if err != nil {
				return fmt.Errorf("watcher %d: %w", i, err)
			}
			read = func() {
				defer body.Close()
				readHTTPWatch(body, o.proto, consume)
			}
		} else {
			cl, err := e.openWatch(wctx, i, &watchv1.WatchRequest{Resource: &watchv1.Resource{Version: "v1", Resource: "configmaps"}, Namespace: "load", ResourceVersion: strconv.FormatInt(start, 10)})
			if err != nil {
				return fmt.Errorf("watcher %d: %w", i, err)
			}
			read = func() {
				for {
					resp, err := cl.Recv()
					now := time.Now()
					if err != nil {
						return
					}
					rev, _ := strconv.ParseInt(resp.GetResourceVersion(), 10, 64)
					consume(resp.GetFrames(), rev, now)
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer report()
			read()
		}()
	}
	fmt.Printf("%d watchers open\n", o.watchers)
	payload := strings.Repeat("x", max(0, o.size-22))
	tick := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
	defer tick.Stop()
	end := time.Now().Add(o.duration)
	var writes atomic.Int64
	var writers sync.WaitGroup
	// Writes are issued at the rate, each in its own goroutine, so a slow
	// fsync does not lower the rate.
	for n := 0; time.Now().Before(end) && ctx.Err() == nil; n++ {
		<-tick.C
		writers.Add(1)
		go func() {
			defer writers.Done()
			sent := time.Now()
			data := fmt.Sprintf("ts=%019d;", sent.UnixNano()) + payload
			rev, err := e.put(ctx, "load", fmt.Sprintf("cm-%d", n%100), data)
			if err != nil {
				fmt.Println("write:", err)
				return
			}
			now := time.Now()
			acked.Store(rev, now)
			mu.Lock()
			toAck = append(toAck, now.Sub(sent))
			mu.Unlock()
			writes.Add(1)
		}()
	}
	writers.Wait()
	time.Sleep(2 * time.Second)
	after, storeAfter := readProc(o.pid), readProc(o.storePid)
	stop()
	wg.Wait()
	want := writes.Load() * int64(o.watchers)
	fmt.Printf("writes=%d (%.1f/s, %d B objects) deliveries=%d/%d, watchers cut off: %d\n", writes.Load(), float64(writes.Load())/o.duration.Seconds(), o.size, delivered.Load(), want, errorsSeen.Load())
	fmt.Printf("delay from Txn sent to delivery:  %s\n", percentiles(fromSend))
	fmt.Printf("delay from Txn acked to delivery (last event of each message): %s\n", percentiles(fromAck))
	fmt.Printf("delay from Txn sent to Txn acked: %s\n", percentiles(toAck))
	var ackToFirst []time.Duration
	acked.Range(func(rev, at any) bool {
		if first, ok := firstAt.Load(rev); ok {
			ackToFirst = append(ackToFirst, first.(time.Time).Sub(at.(time.Time)))
		}
		return true
	})
	fmt.Printf("first delivery less the Txn's answer, per write (negative: delivered first): %s\n", percentiles(ackToFirst))
	fmt.Printf("watchfanout: %s\n", after.delta(before, o.duration+2*time.Second))
	if o.storePid != 0 {
		fmt.Printf("store: %s\n", storeAfter.delta(storeBefore, o.duration+2*time.Second))
	}
	return nil
}

func (e *env) idleScenario(ctx context.Context) error {
	o := e.o
	time.Sleep(2 * time.Second)
	before := readProc(o.pid)
	var streams []grpc.ServerStreamingClient[watchv1.WatchResponse]
	began := time.Now()
	for i := range o.watchers {
		cl, err := e.openWatch(ctx, i, &watchv1.WatchRequest{Resource: &watchv1.Resource{Version: "v1", Resource: "configmaps"}, Namespace: fmt.Sprintf("idle-%d", i%o.namespaces), ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("watcher %d: %w", i, err)
		}
		streams = append(streams, cl)
	}
	fmt.Printf("%d watchers over %d namespaces open in %v\n", o.watchers, o.namespaces, time.Since(began).Round(time.Millisecond))
	time.Sleep(5 * time.Second)
	opened := readProc(o.pid)
	time.Sleep(o.duration)
	rest := readProc(o.pid)
	fmt.Printf("RSS before %.1f MiB, with watchers %.1f MiB: %.2f KiB per watcher\n",
		mib(before.rss), mib(opened.rss), float64(opened.rss-before.rss)/1024/float64(o.watchers))
	fmt.Printf("at rest over %v: %s\n", o.duration, rest.delta(opened, o.duration))
	fmt.Printf("after rest (GC and stack shrinking had time to run): %.2f KiB per watcher\n", float64(rest.rss-before.rss)/1024/float64(o.watchers))
	_ = streams
	return nil
}

func ptr[T any](v T) *T { return &v }

func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "no samples"
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	p := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return fmt.Sprintf("n=%d p50=%v p90=%v p99=%v max=%v", len(d), p(0.50).Round(10*time.Microsecond), p(0.90).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), d[len(d)-1].Round(10*time.Microsecond))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// proc is a sample of a process's /proc state.
type proc struct {
	rss, hwm int64         // bytes
	cpu      time.Duration // user + system
}

func (p proc) String() string {
	return fmt.Sprintf("RSS %.1f MiB, VmHWM %.1f MiB, CPU %v", mib(p.rss), mib(p.hwm), p.cpu.Round(time.Millisecond))
}

func (p proc) delta(before proc, over time.Duration) string {
	cpu := p.cpu - before.cpu
	return fmt.Sprintf("RSS %.1f → %.1f MiB, CPU %v over %v (%.1f%% of one core)", mib(before.rss), mib(p.rss), cpu.Round(time.Millisecond), over.Round(time.Second), 100*cpu.Seconds()/over.Seconds())
}

func readProc(pid int) proc {
	var p proc
	if pid == 0 {
		return p
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				switch f[0] {
				case "VmRSS:":
					p.rss = n << 10
				case "VmHWM:":
					p.hwm = n << 10
				}
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+2:])
			if len(f) > 13 {
				ut, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				p.cpu = time.Duration(ut+st) * (time.Second / 100) // USER_HZ = 100
			}
		}
	}
	return p
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return bytes.Count(b, []byte("processor\t:"))
}
