package grpcapi

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
)

// settleLimit bounds how long heapLive waits for the server's goroutines
// of answered calls to end; reaching it does not fail the test by itself
// (the counts it returns then do).
const settleLimit = 10 * time.Second

// heapLive waits until at most settled goroutines are left (a call's
// goroutine on the server may still be returning after its client read
// the answer), or settleLimit passed; then it returns the bytes and
// objects the heap holds live after a full collection, and the number of
// goroutines.
func heapLive(settled int) (bytes, objects uint64, goroutines int) {
	for deadline := time.Now().Add(settleLimit); runtime.NumGoroutine() > settled && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	// Two cycles: the first frees what sync.Pools held; the second
	// counts what is left.
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/objects:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), runtime.NumGoroutine()
}

// TestRefusedCallsLeaveNothing sends refused calls with a deadline of 100
// days (grpc-timeout) on one connection, 99 at a time — anonymous Gets,
// anonymous Watches, and Gets by alice impersonating bob — and checks that
// each is refused and that the refused calls leave nothing behind: what
// the heap holds live after about 20,000 of them is what it held after
// 2,000, give or take far less than one object per call. A server that kept
// anything of a refused call until its deadline (a context, a timer, a
// stream) would grow by some hundred bytes and several objects per call.
func TestRefusedCallsLeaveNothing(t *testing.T) {
	rc := dialRaw(t, serve(t, &recordingService{}))
	// The server and the connection at rest, and a margin for goroutines
	// of the runtime and gRPC that come and go.
	settled := runtime.NumGoroutine() + 5
	kinds := []struct {
		method string
		md     map[string]string
		want   string
	}{
		{apiv1.ResourceService_Get_FullMethodName, map[string]string{"grpc-timeout": "2400H"}, "200 grpc-status=16"},
		{apiv1.ResourceService_Watch_FullMethodName, map[string]string{"grpc-timeout": "2400H"}, "200 grpc-status=16"},
		{apiv1.ResourceService_Get_FullMethodName, map[string]string{"grpc-timeout": "2400H", "authorization": "Bearer alice-token", "impersonate-user": "bob"}, "200 grpc-status=7"},
	}
	next := uint32(1)
	refuse := func(n int) {
		t.Helper()
		const batch = 99
		for done := 0; done < n; done += batch {
			want := map[uint32]string{}
			ids := make([]uint32, 0, batch)
			for i := range batch {
				k := kinds[i%len(kinds)]
				rc.writeHeaders(next, k.method, k.md, true)
				ids = append(ids, next)
				want[next] = k.want
				next += 2
			}
			for id, got := range rc.statuses(ids) {
				if got != want[id] {
					t.Fatalf("refused call on stream %d: %s, want %s", id, got, want[id])
				}
			}
		}
	}

	const first, more = 1980, 18018
	refuse(first)
	bytes1, objects1, g1 := heapLive(settled)
	refuse(more)
	bytes2, objects2, g2 := heapLive(settled)
	t.Logf("after %d refused calls: %d bytes, %d objects, %d goroutines live; after %d more: %d bytes, %d objects, %d goroutines",
		first, bytes1, objects1, g1, more, bytes2, objects2, g2)
	if bytes2 > bytes1 && bytes2-bytes1 > 16*more {
		t.Errorf("%d more refused calls grew the live heap by %d bytes (%d per call): they leave state behind", more, bytes2-bytes1, (bytes2-bytes1)/more)
	}
	if objects2 > objects1 && objects2-objects1 > more/4 {
		t.Errorf("%d more refused calls left %d more live objects", more, objects2-objects1)
	}
	if g2 > g1+5 {
		t.Errorf("%d more refused calls left %d more goroutines", more, g2-g1)
	}
}
