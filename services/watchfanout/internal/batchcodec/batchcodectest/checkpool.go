// Package batchcodectest has a buffer pool for tests that checks the
// lifetime of the buffers gRPC is handed (see package batchcodec).
package batchcodectest

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
)

// Poison is the byte a buffer is filled with when it is put back.
const Poison = 0xEE

// CheckPool is a mem.BufferPool that catches a buffer reused while gRPC
// still holds it: a buffer put back is overwritten with Poison at once
// (bytes gRPC had yet to write would reach the client poisoned) and
// handed out again by the next Get that fits (they would be overwritten
// by another message). Putting back a buffer that is not out is an error
// of the test. Buffers never have less than 1 KiB of capacity, gRPC's
// pooling threshold, so that gRPC always gives them back.
type CheckPool struct {
	t    testing.TB
	mu   sync.Mutex
	free []*[]byte
	out  map[*[]byte]bool
	gets int
}

var _ mem.BufferPool = (*CheckPool)(nil)

// New returns a pool that reports misuse to t.
func New(t testing.TB) *CheckPool { return &CheckPool{t: t, out: map[*[]byte]bool{}} }

// Get returns a buffer of length n.
func (p *CheckPool) Get(n int) *[]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gets++
	for i, b := range p.free {
		if cap(*b) >= n {
			p.free = append(p.free[:i], p.free[i+1:]...)
			*b = (*b)[:n]
			p.out[b] = true
			return b
		}
	}
	b := make([]byte, n, max(n, 1024))
	p.out[&b] = true
	return &b
}

// Put poisons b and keeps it for the next Get.
func (p *CheckPool) Put(b *[]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.out[b] {
		p.t.Errorf("batchcodectest: a buffer was put back that was not out (twice?)")
		return
	}
	delete(p.out, b)
	full := (*b)[:cap(*b)]
	for i := range full {
		full[i] = Poison
	}
	p.free = append(p.free, b)
}

// Outstanding is the number of buffers handed out and not put back.
func (p *CheckPool) Outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.out)
}

// AwaitReturned waits up to d until every buffer handed out is back
// (gRPC gives a buffer back once its writer is done with it, after the
// send returned) and returns how many are still out.
func (p *CheckPool) AwaitReturned(d time.Duration) int {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if n := p.Outstanding(); n == 0 || time.Now().After(deadline) {
			return n
		}
	}
}

// Gets is the number of Get calls.
func (p *CheckPool) Gets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gets
}
