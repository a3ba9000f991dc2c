package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// miceScenario is the elephants-and-mice run: ten mice flows offer 5 %
// each of global-default's capacity (its seats / the service time) and
// one elephant 10 times it, each request holding its seat for the
// service time; arrivals are open loop and Poisson (each at its time,
// whether or not the earlier ones finished). The in-process service runs
// without borrowing, so the capacity stays what it was. The mice run alone first, then with the
// elephant; it prints each mouse's p99 queue wait in both runs and what
// the elephant got.
func miceScenario(ctx context.Context, c flowcontrolv1.FlowControlServiceClient, out io.Writer, d, service time.Duration) error {
	seats, err := levelSeats(ctx, c, "global-default")
	if err != nil {
		return err
	}
	capacity := float64(seats) / service.Seconds()
	fmt.Fprintf(out, "global-default: %d seats, service time %s: capacity %.0f requests/s; each mouse offers 5%%, the elephant 1000%%\n", seats, service, capacity)
	alone := runFlows(ctx, c, d, service, capacity, false)
	loaded := runFlows(ctx, c, d, service, capacity, true)
	after, err := levelSeats(ctx, c, "global-default")
	if err != nil {
		return err
	}
	share := func(f *flowResult) float64 { return 100 * float64(f.inRun) / d.Seconds() / capacity }
	fmt.Fprintf(out, "%-10s %14s %14s %8s %12s %12s\n", "flow", "p99 alone", "p99 w/ elephant", "ratio", "% alone", "% w/ eleph.")
	for i := range 10 {
		a, l := alone.p99(i), loaded.p99(i)
		ratio := "-"
		if a > 0 {
			ratio = fmt.Sprintf("%.2f", float64(l)/float64(a))
		}
		fmt.Fprintf(out, "mouse-%-4d %14s %14s %8s %12.1f %12.1f\n", i, a, l, ratio, share(alone.flows[i]), share(loaded.flows[i]))
	}
	e := loaded.flows[10]
	fmt.Fprintf(out, "elephant: %.1f%% of capacity during the run, %d rejected; global-default ended with %d seats\n", share(e), e.rejected, after)
	return nil
}

func levelSeats(ctx context.Context, c flowcontrolv1.FlowControlServiceClient, name string) (int, error) {
	d, err := c.Dump(ctx, &flowcontrolv1.DumpRequest{})
	if err != nil {
		return 0, err
	}
	for _, l := range d.GetPriorityLevels() {
		if l.GetName() == name {
			return int(l.GetSeats()), nil
		}
	}
	return 0, fmt.Errorf("no priority level %s", name)
}

type flowResult struct {
	mu       sync.Mutex
	waits    []time.Duration
	rejected int
	// inRun counts the grants made before the run's end (the rest drain
	// the queues after it).
	inRun int
}

type flowsResult struct{ flows [11]*flowResult }

func (r *flowsResult) p99(i int) time.Duration {
	w := slices.Clone(r.flows[i].waits)
	if len(w) == 0 {
		return 0
	}
	slices.Sort(w)
	return w[int(float64(len(w)-1)*0.99)].Round(10 * time.Microsecond)
}

// runFlows runs the ten mice (flows 0-9) and, with elephant, flow 10 for
// d, and waits for every request to finish.
func runFlows(ctx context.Context, c flowcontrolv1.FlowControlServiceClient, d, service time.Duration, capacity float64, elephant bool) *flowsResult {
	res := &flowsResult{}
	var wg sync.WaitGroup
	flows := 10
	if elephant {
		flows = 11
	}
	for f := range 11 {
		res.flows[f] = &flowResult{}
	}
	end := time.Now().Add(d)
	for f := range flows {
		rate := 0.05 * capacity
		name := fmt.Sprintf("mouse-%d", f)
		if f == 10 {
			rate, name = 10*capacity, "elephant"
		}
		interval := time.Duration(float64(time.Second) / rate)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &flowcontrolv1.AcquireRequest{GatewayId: "loadtest", Digest: &flowcontrolv1.RequestDigest{
				User: name, Groups: []string{"system:authenticated"}, Verb: "get", Resource: "configmaps", Namespace: "default", IsResourceRequest: true,
			}}
			fr := res.flows[f]
			// Poisson arrivals, each flow its own seeded sequence.
			rng := rand.New(rand.NewPCG(uint64(f), 1))
			for next := time.Now(); next.Before(end); next = next.Add(time.Duration(rng.ExpFloat64() * float64(interval))) {
				time.Sleep(time.Until(next))
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := c.Acquire(ctx, req)
					if err != nil {
						fr.mu.Lock()
						fr.rejected++
						fr.mu.Unlock()
						return
					}
					fr.mu.Lock()
					fr.waits = append(fr.waits, resp.GetGrant().GetQueueWait().AsDuration())
					if time.Now().Before(end) {
						fr.inRun++
					}
					fr.mu.Unlock()
					time.Sleep(service)
					_, _ = c.Release(context.WithoutCancel(ctx), &flowcontrolv1.ReleaseRequest{GrantId: resp.GetGrant().GetId()})
				}()
			}
		}()
	}
	wg.Wait()
	return res
}
