package coalesce

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// pair returns a wrapped client end and the raw server end of a loopback
// TCP connection.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wl := NewListener(l)
	dialed := make(chan net.Conn, 1)
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	c, err := wl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	peer := <-dialed
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c.(*Conn), peer
}

// TestOrderAndContent: what many writes queue arrives whole and in order,
// also when writers race (each Write stays contiguous).
func TestOrderAndContent(t *testing.T) {
	c, peer := pair(t)
	var want bytes.Buffer
	for i := range 5000 {
		fmt.Fprintf(&want, "frame %05d %s\n", i, bytes.Repeat([]byte{'x'}, i%300))
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(want.Len())))
		got <- b
	}()
	for line := range bytes.Lines(want.Bytes()) {
		if _, err := c.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("received %d bytes, not what was written (%d)", len(b), want.Len())
	}

	// Racing writers: every write arrives contiguous.
	const writers, each = 8, 500
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(writers*each*len("w0-000000000.....\n"))))
		got <- b
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := fmt.Fprintf(c, "w%d-%09d.....\n", w, i); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	b := <-got
	next := make([]int, writers)
	for line := range bytes.Lines(b) {
		var w, i int
		if _, err := fmt.Sscanf(string(line), "w%d-%09d.....\n", &w, &i); err != nil || i != next[w] {
			t.Fatalf("line %q out of order or torn (want writer %d at %d)", line, w, next[w])
		}
		next[w]++
	}
}

// TestBackPressure: a reader that stops makes Write wait once MaxPending
// bytes are queued behind the batch being sent, and reading again lets it go on.
func TestBackPressure(t *testing.T) {
	client, server := net.Pipe() // synchronous: nothing moves until read
	c := NewConn(client)
	defer c.Close()
	chunk := make([]byte, 32<<10)
	wrote := make(chan int, 1)
	go func() {
		n := 0
		for range 3 * MaxPending / len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				break
			}
			n += len(chunk)
		}
		wrote <- n
	}()
	select {
	case n := <-wrote:
		t.Fatalf("wrote %d bytes to a stalled reader without waiting", n)
	case <-time.After(200 * time.Millisecond):
	}
	go io.Copy(io.Discard, server)
	select {
	case n := <-wrote:
		if n != 3*MaxPending {
			t.Fatalf("wrote %d", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Write stayed blocked after the reader resumed")
	}
}

// TestErrorsStick: once a send fails, every later Write reports it.
func TestErrorsStick(t *testing.T) {
	client, server := net.Pipe()
	c := NewConn(client)
	server.Close()
	_, _ = c.Write([]byte("lost"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Write([]byte("x"))
		if err != nil {
			if !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("error %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes kept succeeding on a closed connection")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCloseSendsWhatIsQueued: Close delivers queued bytes first, and gives
// up after CloseTimeout when nobody reads.
func TestCloseSendsWhatIsQueued(t *testing.T) {
	c, peer := pair(t)
	msg := bytes.Repeat([]byte("0123456789"), 10000)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(peer)
	if err != nil || !bytes.Equal(b, msg) {
		t.Fatalf("peer read %d bytes (%v), want %d", len(b), err, len(msg))
	}
	if _, err := c.Write([]byte("late")); err == nil {
		t.Fatal("Write after Close succeeded")
	}

	client, _ := net.Pipe() // nobody ever reads
	stalled := NewConn(client)
	_, _ = stalled.Write([]byte("never read"))
	start := time.Now()
	_ = stalled.Close()
	if waited := time.Since(start); waited > CloseTimeout+2*time.Second {
		t.Fatalf("Close waited %v for a reader that never came", waited)
	}
}

// TestDeadlineAfterQueuedBytes: a write deadline set after bytes were
// queued does not cut them off (TLS queues its close_notify alert and then
// sets a deadline of now).
func TestDeadlineAfterQueuedBytes(t *testing.T) {
	client, server := net.Pipe()
	c := NewConn(client)
	defer c.Close()
	if _, err := c.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	set := make(chan error, 1)
	go func() { set <- c.SetWriteDeadline(time.Now()) }()
	buf := make([]byte, len("response"))
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "response" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if err := <-set; err != nil {
		t.Fatal(err)
	}
	// Written after the deadline passed: fails, as on a plain connection.
	_, _ = c.Write([]byte("late"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := c.Write([]byte("x")); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("error %v, want a timeout", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("writes past the deadline kept succeeding")
		}
		time.Sleep(time.Millisecond)
	}
}

// goroutineConn is a net.Conn that records what is written to it and the
// goroutine each Write ran on.
type goroutineConn struct {
	net.Conn // nil: only Write and Close are used
	mu       sync.Mutex
	data     bytes.Buffer
	writers  []string
}

func (g *goroutineConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.data.Write(p)
	g.writers = append(g.writers, goid())
	return len(p), nil
}

func (g *goroutineConn) Close() error { return nil }

// goid is the calling goroutine's id, from its stack's header.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	if f := bytes.Fields(buf); len(f) > 1 {
		return string(f[1])
	}
	return ""
}

// TestDirectWritesThrough: after Direct, a Write is written on its
// caller's goroutine, after what was queued before it.
func TestDirectWritesThrough(t *testing.T) {
	g := &goroutineConn{}
	c := NewConn(g)
	if _, err := c.Write([]byte("queued ")); err != nil {
		t.Fatal(err)
	}
	c.Direct()
	if _, err := c.Write([]byte("direct")); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if got := g.data.String(); got != "queued direct" {
		t.Errorf("written %q, want %q", got, "queued direct")
	}
	if n := len(g.writers); n == 0 || g.writers[n-1] != goid() {
		t.Errorf("the direct Write ran on goroutines %v, want the caller's %s last", g.writers, goid())
	}
}
