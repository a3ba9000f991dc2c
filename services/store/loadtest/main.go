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
// With -compare, it drives a meridian cluster and an etcd cluster that run
// side by side, in alternating slices of -slice each (meridian, etcd, then
// etcd, meridian, ...) until each has had -duration of every workload and
// level, and prints both rows and their ratio. This machine's speed drifts
// by tens of percent within minutes; slices cancel that drift, which
// separate runs of the two stores one after the other do not.
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

// pct returns the p-quantile of lat, which it sorts.
func pct(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, int(p*float64(len(lat))))]
}

func (r result) String() string {
	return fmt.Sprintf("%-18s conc=%-4d ops=%-7d errors=%-4d ops/s=%-9.0f p50=%-9v p99=%-9v p99.9=%v",
		r.name, r.concurrency, r.ops, r.errors, float64(r.ops)/r.elapsed.Seconds(),
		pct(r.lat, 0.50).Round(time.Microsecond), pct(r.lat, 0.99).Round(time.Microsecond), pct(r.lat, 0.999).Round(time.Microsecond))
}

// add accumulates another slice of the same workload into r.
func (r *result) add(o result) {
	r.name, r.concurrency = o.name, o.concurrency
	r.ops += o.ops
	r.errors += o.errors
	r.elapsed += o.elapsed
	r.lat = append(r.lat, o.lat...)
}

func (r result) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }

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

// workload is one row of the report: op from conc workers. slice numbers
// the runs of the same row, so that puts stay under unique keys.
type workload struct {
	name string
	conc int
	op   func(slice int) func(ctx context.Context, c kv, worker, seq int) error
}

// target is one store under test: its name, its endpoints and its client
// connections.
type target struct {
	name      string
	endpoints []string
	clients   []kv
}

func dialTarget(name, eps string, conns int) (*target, error) {
	t := &target{name: name, endpoints: strings.Split(eps, ",")}
	for range conns {
		c, err := dial(name, t.endpoints)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("dial %s: %w", name, err)
		}
		t.clients = append(t.clients, c)
	}
	return t, nil
}

func (t *target) close() {
	for _, c := range t.clients {
		c.close()
	}
}

func main() {
	targetName := flag.String("target", "meridian", "meridian or etcd")
	eps := flag.String("endpoints", "127.0.0.1:2479", "comma-separated gRPC endpoints")
	compare := flag.String("compare", "", "etcd's comma-separated endpoints: drive -endpoints (meridian) and these (etcd) in alternating slices")
	slice := flag.Duration("slice", time.Second, "with -compare, the length of one slice")
	concs := flag.String("concurrency", "1,16,256", "client concurrency levels")
	d := flag.Duration("duration", 10*time.Second, "duration of each workload (per target with -compare)")
	conns := flag.Int("clients", 4, "client connections shared by the workers")
	watchRate := flag.Int("watch-rate", 500, "puts per second during the watch-latency workload")
	workloads := flag.String("workloads", "put,get,watch", "workloads to run: put, get (linearizable and serializable), watch")
	watchMembers := flag.Bool("watch-members", false, "measure watch delivery once per member, with the watcher connected to that member alone (leader and followers apart)")
	flag.Parse()

	var targets []*target
	if *compare != "" {
		*targetName = "meridian"
	}
	t, err := dialTarget(*targetName, *eps, *conns)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer t.close()
	targets = append(targets, t)
	if *compare != "" {
		e, err := dialTarget("etcd", *compare, *conns)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer e.close()
		targets = append(targets, e)
		fmt.Printf("# meridian %s and etcd %s in alternating slices of %v, %v each per row, clients %d\n", *eps, *compare, *slice, *d, *conns)
	} else {
		fmt.Printf("# target %s endpoints %s duration %v clients %d\n", *targetName, *eps, *d, *conns)
	}
	value := make([]byte, 256)
	for i := range value {
		value[i] = 'a' + byte(i%26)
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

	var rows []workload
	if want["put"] {
		for _, conc := range levels {
			rows = append(rows, workload{"put", conc, func(slice int) func(ctx context.Context, c kv, w, seq int) error {
				return func(ctx context.Context, c kv, w, seq int) error {
					return c.put(ctx, fmt.Sprintf("/bench/put/%d/%d/%d/%d", conc, slice, w, seq), value)
				}
			}})
		}
	}
	if want["get"] {
		// Reads of a key set written once.
		for _, t := range targets {
			for i := range 1000 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = t.clients[0].put(ctx, fmt.Sprintf("/bench/read/%04d", i), value)
				cancel()
			}
		}
		for _, serializable := range []bool{false, true} {
			name := "get-linearizable"
			if serializable {
				name = "get-serializable"
			}
			for _, conc := range levels {
				rows = append(rows, workload{name, conc, func(int) func(ctx context.Context, c kv, w, seq int) error {
					return func(ctx context.Context, c kv, w, seq int) error {
						return c.get(ctx, fmt.Sprintf("/bench/read/%04d", (w*7919+seq)%1000), serializable)
					}
				}})
			}
		}
	}

	for _, row := range rows {
		if len(targets) == 1 {
			fmt.Println(run(row.name, targets[0].clients, row.conc, *d, row.op(0)))
			continue
		}
		res := make([]result, len(targets))
		for i := 0; res[0].elapsed < *d || res[1].elapsed < *d; i++ {
			// meridian first in even rounds, etcd first in odd ones.
			for j := range targets {
				k := (i + j) % len(targets)
				if res[k].elapsed < *d {
					res[k].add(run(row.name, targets[k].clients, row.conc, *slice, row.op(i)))
				}
			}
		}
		for k, r := range res {
			fmt.Printf("%-8s %v\n", targets[k].name, r)
		}
		fmt.Printf("%-8s %-18s conc=%-4d throughput %.2f×, p99 %.2f× etcd's\n", "ratio", row.name, row.conc,
			res[0].rate()/res[1].rate(), float64(pct(res[0].lat, 0.99))/float64(pct(res[1].lat, 0.99)))
	}
	if want["watch"] {
		for _, t := range targets {
			type watcher struct {
				via string
				c   kv
			}
			// By default the watcher shares a client with the writers, so
			// it opens where that client sends it (for meridian, the
			// member it believes leads).
			watchers := []watcher{{"", t.clients[1%len(t.clients)]}}
			if *watchMembers {
				watchers = nil
				for _, ep := range t.endpoints {
					c, err := dial(t.name, []string{ep})
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
					defer c.close()
					watchers = append(watchers, watcher{ep, c})
				}
			}
			for _, w := range watchers {
				r := watchLatency(w.c, t.clients, *d, *watchRate, value)
				if w.via != "" {
					r.name += " via " + w.via
				}
				if len(targets) > 1 {
					fmt.Printf("%-8s ", t.name)
				}
				fmt.Println(r)
			}
		}
	}
}

// watchLatency puts at rate per second through clients with the send time
// in the value and measures when watcher receives each event.
func watchLatency(watcher kv, clients []kv, d time.Duration, rate int, value []byte) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var lats []time.Duration
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		_ = watcher.watch(ctx, "/bench/watch/", func(val []byte) {
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
