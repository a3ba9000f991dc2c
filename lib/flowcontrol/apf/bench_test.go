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
