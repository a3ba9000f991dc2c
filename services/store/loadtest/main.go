// Command loadtest drives a store cluster alone over gRPC — meridian's
// store through its Go client, or etcd through clientv3, with the same
// workload — and prints throughput and latency percentiles:
//
//   - put: 256-byte values under unique keys, at each -concurrency level;
//   - get-linearizable and get-serializable: single-key reads of keys
//     written first;
//   - watch: delivery latency of events to one watcher while a writer puts
//     at a fixed rate.
//
// It is a separate module (not in go.work) because etcd's client pins its
// own dependencies; run it with GOWORK=off (see run.sh).
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
)

// kv is the workload's view of a store.
type kv interface {
	put(ctx context.Context, key string, val []byte) error
	get(ctx context.Context, key string, serializable bool) error
	// watch calls fn with the value of every put under prefix.
	watch(ctx context.Context, prefix string, fn func(val []byte)) error
	close()
}

type meridianKV struct{ c *client.Client }

func (m meridianKV) put(ctx context.Context, key string, val []byte) error {
	_, err := m.c.KV().Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{
		RequestPut: &storev1.PutRequest{Key: []byte(key), Value: val}}}}})
	return err
}

func (m meridianKV) get(ctx context.Context, key string, serializable bool) error {
	_, err := m.c.KV().Range(ctx, &storev1.RangeRequest{Key: []byte(key), Serializable: serializable})
	return err
}

func (m meridianKV) watch(ctx context.Context, prefix string, fn func([]byte)) error {
	end := []byte(prefix)
	end[len(end)-1]++
	return m.c.Watch(ctx, &storev1.WatchCreateRequest{Key: []byte(prefix), RangeEnd: end}, func(r *storev1.WatchResponse) error {
		for _, ev := range r.GetEvents() {
			fn(ev.GetKv().GetValue())
		}
		return nil
	})
}

func (m meridianKV) close() { _ = m.c.Close() }

type etcdKV struct{ c *clientv3.Client }

func (e etcdKV) put(ctx context.Context, key string, val []byte) error {
	_, err := e.c.Put(ctx, key, string(val))
	return err
}

func (e etcdKV) get(ctx context.Context, key string, serializable bool) error {
	var opts []clientv3.OpOption
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	_, err := e.c.Get(ctx, key, opts...)
	return err
}

func (e etcdKV) watch(ctx context.Context, prefix string, fn func([]byte)) error {
	for r := range e.c.Watch(ctx, prefix, clientv3.WithPrefix()) {
		for _, ev := range r.Events {
			fn(ev.Kv.Value)
		}
	}
	return ctx.Err()
}

func (e etcdKV) close() { _ = e.c.Close() }

func dial(target string, endpoints []string) (kv, error) {
	switch target {
	case "meridian":
		c, err := client.Dial(endpoints, nil)
		return meridianKV{c}, err
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
		return etcdKV{c}, err
	}
	return nil, fmt.Errorf("unknown target %q", target)
}

// result of one workload.
type result struct {
	name        string
	concurrency int
	ops         int
	errors      int64
	elapsed     time.Duration
	lat         []time.Duration
}

func (r result) String() string {
	slices.Sort(r.lat)
	pct := func(p float64) time.Duration {
		if len(r.lat) == 0 {
			return 0
		}
		return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
	}
	return fmt.Sprintf("%-18s conc=%-4d ops=%-7d errors=%-4d ops/s=%-9.0f p50=%-9v p99=%-9v p99.9=%v",
		r.name, r.concurrency, r.ops, r.errors, float64(r.ops)/r.elapsed.Seconds(),
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), pct(0.999).Round(time.Microsecond))
}

// run runs op from conc goroutines for d, each on clients[i%len].
func run(name string, clients []kv, conc int, d time.Duration, op func(ctx context.Context, c kv, worker, seq int) error) result {
	var wg sync.WaitGroup
	var errs atomic.Int64
	lats := make([][]time.Duration, conc)
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w%len(clients)]
			for seq := 0; time.Now().Before(deadline); seq++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				err := op(ctx, c, w, seq)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	r := result{name: name, concurrency: conc, errors: errs.Load(), elapsed: time.Since(start)}
	for _, l := range lats {
		r.lat = append(r.lat, l...)
		r.ops += len(l)
	}
	return r
}

func main() {
	target := flag.String("target", "meridian", "meridian or etcd")
	eps := flag.String("endpoints", "127.0.0.1:2479", "comma-separated gRPC endpoints")
	concs := flag.String("concurrency", "1,16,256", "client concurrency levels")
	d := flag.Duration("duration", 10*time.Second, "duration of each workload")
	conns := flag.Int("clients", 4, "client connections shared by the workers")
	watchRate := flag.Int("watch-rate", 500, "puts per second during the watch-latency workload")
	workloads := flag.String("workloads", "put,get,watch", "workloads to run: put, get (linearizable and serializable), watch")
	flag.Parse()

	endpoints := strings.Split(*eps, ",")
	var clients []kv
	for range *conns {
		c, err := dial(*target, endpoints)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			os.Exit(1)
		}
		defer c.close()
		clients = append(clients, c)
	}
	value := make([]byte, 256)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	fmt.Printf("# target %s endpoints %s duration %v clients %d\n", *target, *eps, *d, *conns)
	run := func(name string, conc int, op func(ctx context.Context, c kv, worker, seq int) error) {
		fmt.Println(run(name, clients, conc, *d, op))
	}
	var levels []int
	for _, s := range strings.Split(*concs, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad -concurrency:", err)
			os.Exit(2)
		}
		levels = append(levels, n)
	}
	want := map[string]bool{}
	for _, w := range strings.Split(*workloads, ",") {
		want[w] = true
	}
	for _, conc := range levels {
		if !want["put"] {
			break
		}
		run("put", conc, func(ctx context.Context, c kv, w, seq int) error {
			return c.put(ctx, fmt.Sprintf("/bench/put/%d/%d/%d", conc, w, seq), value)
		})
	}
	if !want["get"] {
		if want["watch"] {
			fmt.Println(watchLatency(clients, *d, *watchRate, value))
		}
		return
	}
	// Reads of a key set written once.
	for i := range 1000 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = clients[0].put(ctx, fmt.Sprintf("/bench/read/%04d", i), value)
		cancel()
	}
	for _, serializable := range []bool{false, true} {
		name := "get-linearizable"
		if serializable {
			name = "get-serializable"
		}
		for _, conc := range levels {
			run(name, conc, func(ctx context.Context, c kv, w, seq int) error {
				return c.get(ctx, fmt.Sprintf("/bench/read/%04d", (w*7919+seq)%1000), serializable)
			})
		}
	}
	if want["watch"] {
		fmt.Println(watchLatency(clients, *d, *watchRate, value))
	}
}

// watchLatency puts at rate per second with the send time in the value and
// measures when one watcher receives each event.
func watchLatency(clients []kv, d time.Duration, rate int, value []byte) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var lats []time.Duration
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		_ = clients[1%len(clients)].watch(ctx, "/bench/watch/", func(val []byte) {
			once.Do(func() { close(ready) })
			if len(val) < 8 {
				return
			}
			sent := time.Unix(0, int64(binary.BigEndian.Uint64(val)))
			mu.Lock()
			lats = append(lats, time.Since(sent))
			mu.Unlock()
		})
	}()
	// Prime until the watch delivers.
	for i := 0; ; i++ {
		_ = clients[0].put(ctx, "/bench/watch/prime", []byte("x"))
		select {
		case <-ready:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	mu.Lock()
	lats = nil
	mu.Unlock()
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var errs atomic.Int64
	var wg sync.WaitGroup
	for i := 0; time.Since(start) < d; i++ {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := append(binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())), value[8:]...)
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			defer pcancel()
			if err := clients[i%len(clients)].put(pctx, fmt.Sprintf("/bench/watch/%d", i), v); err != nil {
				errs.Add(1)
			}
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	return result{name: fmt.Sprintf("watch@%d/s", rate), concurrency: 1, ops: len(lats), errors: errs.Load(),
		elapsed: time.Since(start), lat: append([]time.Duration(nil), lats...)}
}
