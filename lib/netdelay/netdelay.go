// Package netdelay is a TCP proxy for tests that delays every byte by a
// fixed time in each direction: a long link on one host. The multi-region
// simulation (test/deploy) and the store's replication and robustness
// tests use it.
package netdelay

import (
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proxy forwards every TCP connection accepted on one address to a
// target address and holds each chunk of bytes for a fixed delay in each
// direction before passing it on, in order: a link with that one-way
// latency and no bandwidth limit. The multi-region simulation puts one
// between each region and each store member of another region, because
// this machine's kernel has no netem qdisc (tc qdisc add ... netem fails
// with "Specified qdisc kind is unknown").
type Proxy struct {
	lis    net.Listener
	target string
	delay  time.Duration

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	near  map[string]bool // source IPs not delayed (Near)
	wg    sync.WaitGroup
}

// Start listens on listen and forwards to target with delay each way
// until the test ends.
func Start(t testing.TB, listen, target string, delay time.Duration) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("delay proxy on %s: %v", listen, err)
	}
	p := &Proxy{lis: lis, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Echo starts a TCP server on a free loopback port that writes back
// whatever each connection sends, closed when the test ends, and returns
// its address: the far end to time a Proxy's round trip against.
func Echo(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("echo server: %v", err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return lis.Addr().String()
}

// Near makes connections accepted from now on from any of ips pass
// without delay: hosts in the target's own region, when regions share
// one proxy per member.
func (p *Proxy) Near(ips ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.near == nil {
		p.near = map[string]bool{}
	}
	for _, ip := range ips {
		p.near[ip] = true
	}
}

// delayFrom is the delay of a connection from addr.
func (p *Proxy) delayFrom(addr net.Addr) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if tcp, ok := addr.(*net.TCPAddr); ok && p.near[tcp.IP.String()] {
		return 0
	}
	return p.delay
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
			if err != nil {
				in.Close()
				return
			}
			if !p.track(in, out) {
				return
			}
			delay := p.delayFrom(in.RemoteAddr())
			var pumps sync.WaitGroup
			pumps.Add(2)
			go func() { defer pumps.Done(); Copy(out, in, delay) }()
			go func() { defer pumps.Done(); Copy(in, out, delay) }()
			pumps.Wait()
			p.untrack(in, out)
		}()
	}
}

// chunk is bytes read at a time, due at at+delay.
type chunk struct {
	b  []byte
	at time.Time
}

// Copy copies src to dst, each chunk delayed by delay, until src ends;
// then it half-closes dst. When dst fails it closes both. A Proxy runs
// one each way; a test's own proxy (one that injects faults) can too.
func Copy(dst, src net.Conn, delay time.Duration) {
	ch := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			waitUntil(c.at.Add(delay))
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				dst.Close()
				for range ch {
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		} else {
			dst.Close()
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			break
		}
	}
	close(ch)
	<-done
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) close() {
	p.lis.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// coarseMargin is how long before a chunk is due its writer stops
// waiting on Go's timers and waits in the kernel instead (waitUntil).
const coarseMargin = 2 * time.Millisecond

// waitUntil returns at due, within the kernel's timer slack (50 µs by
// default), not up to a millisecond late. Go's timers wait in the
// network poller, whose Linux timeout is in whole milliseconds and a
// wait shorter than one is rounded up to one: a 25 ms time.Sleep that
// the poller starts with 0.2 ms left returns 0.8 ms late, and a proxied
// link's one-way delay would be 25 ms plus up to 1 ms of that, at
// random. So the last coarseMargin is a nanosleep system call, which
// holds this goroutine's thread and none of the process's others.
func waitUntil(due time.Time) {
	if d := time.Until(due) - coarseMargin; d > 0 {
		time.Sleep(d)
	}
	for {
		d := time.Until(due)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(d.Nanoseconds())
		if err := syscall.Nanosleep(&ts, nil); err != nil && err != syscall.EINTR {
			time.Sleep(d)
			return
		}
	}
}
