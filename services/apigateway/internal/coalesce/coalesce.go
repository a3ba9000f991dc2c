// Package coalesce turns many small writes on a connection into few system
// calls.
//
// The HTTP/2 server writes each frame through a 4 KiB buffer and flushes
// whenever its queue runs dry, and TLS seals every flush into its own
// record and write(2): a watch event to a thousand watchers is a thousand
// system calls, and a 30 MB list thousands. Beneath TLS, a Conn returns
// from Write as soon as the bytes are queued, and one goroutine per burst
// writes everything queued so far in one call; what is written while that
// call runs joins the next one. An idle connection pays one goroutine
// start per write and no added latency: nothing waits for more bytes.
//
// Invariants: bytes reach the connection in the order of the Writes that
// queued them; a Conn queues at most MaxPending bytes behind the batch it is
// sending (Write waits for room: the back-pressure of a slow reader); the first error of a
// background write is returned by every later Write; Close sends what is
// queued (bounded by CloseTimeout) before closing.
package coalesce

import (
	"net"
	"sync"
	"time"
)

// Defaults.
const (
	// MaxPending bounds the bytes queued on one connection.
	MaxPending = 256 << 10
	// CloseTimeout bounds how long Close tries to send what is queued.
	CloseTimeout = time.Second
)

// Listener wraps the connections of a net.Listener in Conns, which share a
// pool of buffers.
type Listener struct {
	net.Listener
	buffers *sync.Pool
}

// NewListener wraps l.
func NewListener(l net.Listener) *Listener {
	return &Listener{Listener: l, buffers: newPool()}
}

// Accept returns the next connection, wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newConn(c, l.buffers), nil
}

// Conn is a net.Conn whose writes are queued and sent by a background
// goroutine, coalesced.
type Conn struct {
	net.Conn

	buffers *sync.Pool // of *[]byte of bufferSize

	mu      sync.Mutex
	room    sync.Cond // signalled when queued bytes are sent
	pending []byte    // queued, not yet handed to the connection
	spare   []byte    // the previous batch's buffer, for reuse
	writing bool      // a goroutine is sending
	err     error     // sticky: the first write error
	// deadline is the write deadline last set: the one bytes queued now
	// would have been written under.
	deadline time.Time
	// direct: Write writes on the caller's goroutine (Direct).
	direct bool
}

// NewConn wraps c.
func NewConn(c net.Conn) *Conn { return newConn(c, newPool()) }

func newConn(c net.Conn, buffers *sync.Pool) *Conn {
	cc := &Conn{Conn: c, buffers: buffers}
	cc.room.L = &cc.mu
	return cc
}

// Direct makes every later Write write p to the connection on the
// caller's goroutine, after what was queued before, and return once it
// is written: for a writer that coalesces its writes itself (h2conn's
// writer), a goroutine per burst here would be one more hand-over and
// copy per write. Safe to call at any time.
func (c *Conn) Direct() {
	c.mu.Lock()
	c.direct = true
	c.mu.Unlock()
}

// Write queues p and returns; an error is one of an earlier send. After
// Direct, it writes p instead.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.direct {
		return c.writeDirectLocked(p)
	}
	for c.err == nil && len(c.pending) > 0 && len(c.pending)+len(p) > MaxPending {
		c.room.Wait()
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.pending == nil {
		c.pending = (*c.buffers.Get().(*[]byte))[:0]
	}
	c.pending = append(c.pending, p...)
	if !c.writing {
		c.writing = true
		go c.send()
	}
	return len(p), nil
}

// writeDirectLocked writes p once what is being sent is, with c.mu held
// but for the write itself; writing is set meanwhile, so that Close and
// the deadlines wait for it as for a background send.
func (c *Conn) writeDirectLocked(p []byte) (int, error) {
	for c.writing && c.err == nil {
		c.room.Wait()
	}
	if c.err != nil {
		return 0, c.err
	}
	c.writing = true
	c.mu.Unlock()
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.writing = false
	if err != nil && c.err == nil {
		c.err = err
	}
	c.room.Broadcast()
	return n, err
}

// send writes what is queued until nothing is.
func (c *Conn) send() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 && c.err == nil {
		batch := c.pending
		c.pending = c.spare
		c.mu.Unlock()
		_, err := c.Conn.Write(batch)
		c.mu.Lock()
		c.spare = batch[:0]
		if err != nil && c.err == nil {
			c.err = err
		}
		c.room.Broadcast()
	}
	// An idle connection holds no buffer: thousands of idle watches
	// must not cost a buffer each.
	c.putBuffer(c.pending)
	c.putBuffer(c.spare)
	c.pending, c.spare = nil, nil
	c.writing = false
	c.room.Broadcast()
}

// bufferSize is a pooled buffer's capacity: a few TLS records.
const bufferSize = 64 << 10

func newPool() *sync.Pool {
	return &sync.Pool{New: func() any { b := make([]byte, 0, bufferSize); return &b }}
}

func (c *Conn) putBuffer(b []byte) {
	if cap(b) == bufferSize { // grown ones go to the garbage collector
		b = b[:0]
		c.buffers.Put(&b)
	}
}

// SetWriteDeadline sets the write deadline of what is written from now on.
// Bytes queued before are sent first, under the deadline they were queued
// with (at most CloseTimeout when there was none), as a plain connection
// would have sent them before the call: TLS sends its close_notify alert
// and then sets a deadline of now, which must not cut off the response
// queued before it.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(t, c.Conn.SetWriteDeadline)
}

// SetDeadline sets the read and write deadlines; see SetWriteDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	return c.setDeadline(t, c.Conn.SetDeadline)
}

func (c *Conn) setDeadline(t time.Time, set func(time.Time) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drain()
	c.deadline = t
	return set(t)
}

// drain waits, with c.mu held, until nothing is being sent, bounded by the
// current deadline or else CloseTimeout.
func (c *Conn) drain() {
	if !c.writing || c.err != nil {
		return
	}
	limit := c.deadline
	if limit.IsZero() {
		limit = time.Now().Add(CloseTimeout)
	}
	expired := false
	t := time.AfterFunc(time.Until(limit), func() {
		c.mu.Lock()
		expired = true
		c.room.Broadcast()
		c.mu.Unlock()
	})
	defer t.Stop()
	for c.writing && c.err == nil && !expired {
		c.room.Wait()
	}
}

// Close sends what is queued, waiting at most CloseTimeout, and closes the
// connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.writing && c.err == nil {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(CloseTimeout))
		for c.writing {
			c.room.Wait()
		}
	}
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.mu.Unlock()
	return c.Conn.Close()
}
