package apf

import (
	"fmt"
	"testing"
)

// BenchmarkAcquireRelease is one decision of the core, without gRPC:
// classification by the bootstrap configuration, a seat of
// global-default taken and given back, for 64 users.
//
//	go test -run '^$' -bench AcquireRelease -cpu 1 ./flowcontrol/apf (in lib)
func BenchmarkAcquireRelease(b *testing.B) {
	c, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	digests := make([]Digest, 64)
	for i := range digests {
		digests[i] = Digest{User: fmt.Sprintf("user-%d", i), Groups: []string{GroupAuthenticated}, Verb: "get",
			Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true}
	}
	ctx := b.Context()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		g, err := c.Acquire(ctx, "gw", digests[i%len(digests)])
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(ctx, g.ID); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkAcquireFuncQueued is one decision of a request that waits:
// AcquireFunc finds global-default's seats taken and queues the request,
// and the Release of the grant holding the seat dispatches it (its done
// runs in the releasing goroutine); users as BenchmarkAcquireRelease.
//
//	go test -run '^$' -bench AcquireFuncQueued -cpu 1 ./flowcontrol/apf (in lib)
func BenchmarkAcquireFuncQueued(b *testing.B) {
	c, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(benchOneSeat()); err != nil {
		b.Fatal(err)
	}
	digests := make([]Digest, 64)
	for i := range digests {
		digests[i] = Digest{User: fmt.Sprintf("user-%d", i), Groups: []string{GroupAuthenticated}, Verb: "get",
			Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true}
	}
	ctx := b.Context()
	var holder Grant
	done := func(g Grant, err error) {
		if err != nil {
			b.Fatal(err)
		}
		holder = g
	}
	if holder, _, err = c.AcquireFunc(ctx, "gw", digests[0], done); err != nil || holder.ID == "" {
		b.Fatalf("first AcquireFunc = %+v, %v; want the seat", holder, err)
	}
	b.ReportAllocs()
	i := 1
	for b.Loop() {
		if _, q, err := c.AcquireFunc(ctx, "gw", digests[i%len(digests)], done); err != nil || !q.Waiting() {
			b.Fatalf("AcquireFunc with the seat taken = %+v, %v; want it queued", q, err)
		}
		if err := c.Release(ctx, holder.ID); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// benchOneSeat is the bootstrap configuration with one seat at
// global-default, so that every request after the first waits.
func benchOneSeat() Configuration {
	conf := Bootstrap(DefaultServerConcurrencyLimit)
	for i := range conf.Levels {
		if conf.Levels[i].Name == LevelGlobalDefault {
			conf.Levels[i].Seats, conf.Levels[i].MaxSeats = 1, 0
		}
	}
	return conf
}
