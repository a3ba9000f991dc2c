// Command loadtest drives the flow-control service alone over real gRPC:
// each worker loops Acquire then Release as one user, at each concurrency
// level for a bounded time, and prints throughput and latency percentiles.
//
// By default it starts the service in process on a loopback listener;
// --target measures a running service instead (plaintext), and
// --target-pid names that service's process to report its CPU time per
// Acquire + Release (read from /proc/<pid>/stat, Linux). --stream makes
// the calls on one DecisionService.Decide stream instead of unary calls.
//
//	go run ./loadtest --duration 5s --concurrency 1,16,64
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/flowcontrol/decideclient"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/procstat"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/flowcontrol/app"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	target := fs.String("target", "", "address of a running flowcontrol service; empty starts one in process")
	duration := fs.Duration("duration", 5*time.Second, "how long to run each concurrency level")
	levels := fs.String("concurrency", "1,16,64", "comma-separated concurrency levels")
	users := fs.Int("users", 0, "distinct users (flows); 0 means one per worker")
	pid := fs.Int("target-pid", 0, "process id of the --target service: report its CPU time per operation")
	batch := fs.Bool("batch-release", false, "release grants as the gateway does: queued and sent together in ReleaseGrants calls (up to 512), instead of one Release per grant")
	useStream := fs.Bool("stream", false, "make the Acquire and ReleaseGrants calls on one Decide stream (DecisionService) instead of unary calls")
	scenario := fs.String("scenario", "", "\"mice\": the elephants-and-mice run (--duration per phase, --service-time) instead of the Acquire+Release loops")
	serviceTime := fs.Duration("service-time", 20*time.Millisecond, "with --scenario mice: how long each request holds its seat")
	limit := fs.Int("concurrency-limit", 0, "server concurrency limit of the in-process service (global-default gets 20/245 of it); 0 means the default (600)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var conc []int
	for _, s := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("bad concurrency %q", s)
		}
		conc = append(conc, n)
	}

	addr := *target
	if addr == "" {
		cfg := app.Config{ConcurrencyLimit: *limit, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if *scenario == "mice" {
			cfg.BorrowingPeriod = -1 // a fixed capacity
		}
		a, err := app.New(ctx, cfg)
		if err != nil {
			return err
		}
		defer a.Close()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		go a.Serve(lis)
		addr = lis.Addr().String()
	}
	conn, err := grpcclient.Dial(addr, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := flowcontrolv1.NewFlowControlServiceClient(conn)

	if *scenario == "mice" {
		return miceScenario(ctx, client, out, *duration, *serviceTime)
	}
	mode := "unary calls"
	if *useStream {
		mode = "one Decide stream"
	}
	fmt.Fprintf(out, "flowcontrol Acquire+Release over gRPC (%s) on %s, %s per level\n", mode, addr, *duration)
	fmt.Fprintf(out, "%-12s %12s %12s %12s %12s %10s %14s\n", "concurrency", "ops", "ops/s", "p50", "p99", "rejected", "server CPU/op")
	for _, n := range conc {
		cpu0, err := processCPU(*pid)
		if err != nil {
			return err
		}
		var sc *decideclient.Client
		if *useStream {
			if sc, err = decideclient.Open(ctx, conn); err != nil {
				return err
			}
		}
		r, err := measure(ctx, client, sc, n, *users, *duration, *batch)
		if err != nil {
			return err
		}
		if sc != nil {
			if err := sc.Close(); err != nil {
				return err
			}
		}
		cpu1, err := processCPU(*pid)
		if err != nil {
			return err
		}
		perOp := "-"
		if *pid != 0 && r.ops > 0 {
			perOp = ((cpu1 - cpu0) / time.Duration(r.ops)).Round(100 * time.Nanosecond).String()
		}
		fmt.Fprintf(out, "%-12d %12d %12.0f %12s %12s %10d %14s\n", n, r.ops, float64(r.ops)/r.elapsed.Seconds(),
			r.percentile(0.50), r.percentile(0.99), r.rejected, perOp)
	}
	return nil
}

// processCPU returns the user + system CPU time process pid has used; 0
// for pid 0.
func processCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	return procstat.CPU(pid)
}

type result struct {
	ops, rejected int
	elapsed       time.Duration
	latencies     []time.Duration // sorted
}

func (r result) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.latencies)-1) * p)
	return r.latencies[i].Round(time.Microsecond)
}

// measure runs n workers for d; each loops Acquire + Release and records
// the round trip of the pair (with batch, of the Acquire: the release is
// queued for one sender that sends ReleaseGrants of what has queued).
// With sc, the calls go on its stream (a release as a ReleaseGrants of
// one grant) instead of c's unary calls.
func measure(ctx context.Context, c flowcontrolv1.FlowControlServiceClient, sc *decideclient.Client, n, users int, d time.Duration, batch bool) (result, error) {
	if users <= 0 {
		users = n
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu  sync.Mutex
		res result
		wg  sync.WaitGroup
	)
	errc := make(chan error, n+1)
	release := func(id string) error {
		_, err := c.Release(context.WithoutCancel(ctx), &flowcontrolv1.ReleaseRequest{GrantId: id})
		return err
	}
	releaseGrants := func(ids []string) error {
		_, err := c.ReleaseGrants(context.WithoutCancel(ctx), &flowcontrolv1.ReleaseGrantsRequest{GrantIds: ids})
		return err
	}
	acquire := func(req *flowcontrolv1.AcquireRequest) (*flowcontrolv1.AcquireResponse, error) {
		return c.Acquire(ctx, req)
	}
	if sc != nil {
		releaseGrants = func(ids []string) error {
			_, err := sc.ReleaseGrants(context.WithoutCancel(ctx), ids)
			return err
		}
		release = func(id string) error { return releaseGrants([]string{id}) }
		acquire = func(req *flowcontrolv1.AcquireRequest) (*flowcontrolv1.AcquireResponse, error) {
			return sc.Acquire(ctx, req)
		}
	}
	var sent sync.WaitGroup
	drain := func() {}
	if batch {
		queue := make(chan string, 4096)
		release = func(id string) error { queue <- id; return nil }
		sent.Add(1)
		go func() {
			defer sent.Done()
			for id := range queue {
				ids := []string{id}
				for len(ids) < 512 && len(queue) > 0 {
					ids = append(ids, <-queue)
				}
				if err := releaseGrants(ids); err != nil {
					errc <- err
				}
			}
		}()
		drain = func() { close(queue); sent.Wait() }
	}
	start := time.Now()
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &flowcontrolv1.AcquireRequest{
				GatewayId: "loadtest",
				Digest: &flowcontrolv1.RequestDigest{
					User: fmt.Sprintf("user-%d", w%users), Groups: []string{"system:authenticated"},
					Verb: "get", Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true,
				},
			}
			var lat []time.Duration
			rejected := 0
			for ctx.Err() == nil {
				t0 := time.Now()
				resp, err := acquire(req)
				if err != nil {
					// gRPC may see the run's deadline pass before ctx does.
					if ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded {
						break
					}
					if isRejected(err) {
						rejected++
						continue
					}
					errc <- err
					return
				}
				// Release even when the run's time is up.
				if err := release(resp.GetGrant().GetId()); err != nil {
					errc <- err
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			res.rejected += rejected
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	drain()
	close(errc)
	if err := <-errc; err != nil {
		return res, err
	}
	res.ops = len(res.latencies)
	slices.Sort(res.latencies)
	return res, nil
}

func isRejected(err error) bool { return status.Code(err) == codes.ResourceExhausted }
