package inproc

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// chunkSize is the size of the buffers a pipe holds written bytes in.
const chunkSize = 64 << 10

// pipe is one direction of a connection: bytes written wait in chunks
// until read. Writes never block: the gRPC (HTTP/2) flow-control windows
// bound what a peer may send before the other side reads, and each
// transport's reader goroutine drains its end continuously, so the
// chunks stay bounded by them. A Write that never blocks also means two
// peers that both write while neither reads cannot deadlock, as they
// could over net.Pipe. Chunks come from and go back to pool, so that a
// large message does not grow and drop one large buffer per pass.
type pipe struct {
	pool     *sync.Pool // of *[]byte, cap chunkSize
	mu       sync.Mutex
	cond     sync.Cond // signalled when bytes arrive, on close and on a deadline
	chunks   []*[]byte // written, unread bytes; each chunk's len is what it holds
	off      int       // read position in chunks[0]
	closed   bool
	deadline time.Time
	timer    *time.Timer
}

func newPipe(pool *sync.Pool) *pipe {
	p := &pipe{pool: pool}
	p.cond.L = &p.mu
	return p
}

// read reads what is buffered, waiting for bytes, close or the read
// deadline.
func (p *pipe) read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if len(p.chunks) > 0 {
			n := 0
			for n < len(b) && len(p.chunks) > 0 {
				c := p.chunks[0]
				k := copy(b[n:], (*c)[p.off:])
				n += k
				p.off += k
				if p.off == len(*c) {
					*c = (*c)[:0]
					p.pool.Put(c)
					p.chunks[0] = nil
					p.chunks = p.chunks[1:]
					p.off = 0
				}
			}
			return n, nil
		}
		if p.closed {
			return 0, io.EOF
		}
		if !p.deadline.IsZero() && !time.Now().Before(p.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		p.cond.Wait()
	}
}

// write copies b into the chunks; it fails only once the pipe is closed.
func (p *pipe) write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, net.ErrClosed
	}
	n := len(b)
	for len(b) > 0 {
		var c *[]byte
		if k := len(p.chunks); k > 0 && len(*p.chunks[k-1]) < chunkSize {
			c = p.chunks[k-1]
		} else {
			c = p.newChunk()
			p.chunks = append(p.chunks, c)
		}
		k := min(len(b), chunkSize-len(*c))
		*c = append(*c, b[:k]...)
		b = b[k:]
	}
	p.cond.Broadcast()
	return n, nil
}

// newChunk returns an empty chunk from the pool.
func (p *pipe) newChunk() *[]byte {
	if c, ok := p.pool.Get().(*[]byte); ok {
		return c
	}
	c := make([]byte, 0, chunkSize)
	return &c
}

// close makes reads return io.EOF once the buffered bytes are read, and
// writes fail.
func (p *pipe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.cond.Broadcast()
}

// setDeadline sets the read deadline (zero: none), waking a waiting read
// when it passes.
func (p *pipe) setDeadline(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deadline = t
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if !t.IsZero() {
		p.timer = time.AfterFunc(time.Until(t), func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.cond.Broadcast()
		})
	}
	p.cond.Broadcast()
}

// conn is one end of an in-memory connection.
type conn struct {
	r, w        *pipe
	local, peer Addr
	// identity is the certificate the dialing code gave the connection;
	// set on the server's end only.
	identity *AuthInfo
	once     sync.Once
}

func (c *conn) Read(b []byte) (int, error)  { return c.r.read(b) }
func (c *conn) Write(b []byte) (int, error) { return c.w.write(b) }

// Close closes both directions: the peer reads io.EOF.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.r.close()
		c.w.close()
	})
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.peer }

// SetDeadline sets the read deadline; writes never block, so they need
// none.
func (c *conn) SetDeadline(t time.Time) error { c.r.setDeadline(t); return nil }

// SetReadDeadline sets the read deadline.
func (c *conn) SetReadDeadline(t time.Time) error { c.r.setDeadline(t); return nil }

// SetWriteDeadline does nothing: writes never block.
func (c *conn) SetWriteDeadline(time.Time) error { return nil }

// newConn returns the two ends of a connection between client and
// server.
func newConn(pool *sync.Pool, client, server Addr, identity *AuthInfo) (clientEnd, serverEnd *conn) {
	up, down := newPipe(pool), newPipe(pool)
	clientEnd = &conn{r: down, w: up, local: client, peer: server}
	serverEnd = &conn{r: up, w: down, local: server, peer: client, identity: identity}
	return clientEnd, serverEnd
}
