// Package growstack grows a goroutine's stack once, early, to the size a
// request handler ends up needing.
//
// A goroutine starts with a small stack (the runtime sizes it from the
// average stack of all goroutines, which the many idle stream readers of a
// server keep small) and grows it by doubling: each doubling copies the
// whole stack and adjusts every frame, and it happens deep in the call
// chain, where the stack is largest. net/http runs every request of the
// gateway on a new goroutine that reaches ~16 KiB in grpc-gateway, gRPC's
// client and encoding/json, so each request would pay several doublings
// of a deep stack. (gRPC servers avoid the same cost with a pool of
// goroutines: lib/grpcserver.StreamWorkers.)
//
// Grow, called first thing in a handler, takes one frame of growSize bytes,
// so the runtime grows the stack to twice that in one step, while the stack
// holds only a few frames. GrowLarge does the same to 32 KiB for handlers
// that go deeper: the gateway's writes, whose managed-fields update walks
// the object in structured-merge-diff past 16 KiB. The idea is
// CockroachDB's util/growstack; docs/benchmarks.md has what it saves.
package growstack

// growSize is the frame Grow takes: the stack becomes 16 KiB, the depth the
// gateway's handlers reach, and the largest size the runtime serves from
// its per-P stack caches (a 32 KiB stack takes the heap lock).
const growSize = 8 << 10

// Grow grows the calling goroutine's stack to 16 KiB if it is smaller. It
// costs one copy of the caller's (shallow) stack, once per goroutine.
//
//go:noinline
func Grow() {
	var buf [growSize]byte
	use(buf[:])
}

// GrowLarge grows the calling goroutine's stack to 32 KiB if it is
// smaller, in one copy like Grow.
//
//go:noinline
func GrowLarge() {
	var buf [2 * growSize]byte
	use(buf[:])
}

// use keeps buf (and so the frame) from being optimized away.
//
//go:noinline
func use(b []byte) {
	if len(b) != growSize && len(b) != 2*growSize {
		panic("growstack: unexpected frame")
	}
}
