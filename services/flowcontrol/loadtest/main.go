// Command loadtest drives the flow-control service alone over real gRPC:
// each worker loops Acquire then Release as one user, at each concurrency
// level for a bounded time, and prints throughput and latency percentiles.
//
// By default it starts the service in process on a loopback listener;
// --target measures a running service instead (plaintext).
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

	"github.com/meridian-cp/meridian/lib/grpcclient"
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
		a, err := app.New(ctx, app.Config{
			ConcurrencyLimit: *limit,
			Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
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

	fmt.Fprintf(out, "flowcontrol Acquire+Release over gRPC on %s, %s per level\n", addr, *duration)
	fmt.Fprintf(out, "%-12s %12s %12s %12s %12s %10s\n", "concurrency", "ops", "ops/s", "p50", "p99", "rejected")
	for _, n := range conc {
		r, err := measure(ctx, client, n, *users, *duration)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%-12d %12d %12.0f %12s %12s %10d\n", n, r.ops, float64(r.ops)/r.elapsed.Seconds(),
			r.percentile(0.50), r.percentile(0.99), r.rejected)
	}
	return nil
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
// the round trip of the pair.
func measure(ctx context.Context, c flowcontrolv1.FlowControlServiceClient, n, users int, d time.Duration) (result, error) {
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
	errc := make(chan error, n)
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
				resp, err := c.Acquire(ctx, req)
				if err != nil {
					if ctx.Err() != nil {
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
				if _, err := c.Release(context.WithoutCancel(ctx), &flowcontrolv1.ReleaseRequest{GrantId: resp.GetGrant().GetId()}); err != nil {
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
	close(errc)
	if err := <-errc; err != nil {
		return res, err
	}
	res.ops = len(res.latencies)
	slices.Sort(res.latencies)
	return res, nil
}

func isRejected(err error) bool { return status.Code(err) == codes.ResourceExhausted }
