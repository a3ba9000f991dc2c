package h2conn

import (
	"runtime"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// This file is the writing side of a connection: streams encode their
// frames into c.pending under c.mu, and the writer goroutine sends all
// that is pending in one Write.

// streamErr is why st can write no more, or nil. c.mu is held.
func (c *conn) streamErrLocked(st *stream) error {
	switch {
	case st.closed:
		return st.err
	case c.closing:
		return c.err
	}
	return nil
}

// streamErr is streamErrLocked, taking c.mu.
func (c *conn) streamErr(st *stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streamErrLocked(st)
}

// writeHeaders queues a header block for st: HEADERS, and CONTINUATION
// frames for what does not fit the peer's frame size; end sets
// END_STREAM. Header frames are not flow-controlled.
func (c *conn) writeHeaders(st *stream, fields []field, end bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.streamErrLocked(st); err != nil {
		return err
	}
	// The hpack encoder's state follows the order of the blocks on the
	// wire: encoding and queueing happen under one hold of c.mu.
	c.hbuf = c.hbuf[:0]
	for _, f := range fields {
		_ = c.henc.WriteField(hpackField(f))
	}
	block := c.hbuf
	max := c.peerMaxFrame
	frag := block[:min(len(block), max)]
	_ = c.wfr.WriteHeaders(http2.HeadersFrameParam{
		StreamID:      st.id,
		BlockFragment: frag,
		EndStream:     end,
		EndHeaders:    len(frag) == len(block),
	})
	for rest := block[len(frag):]; len(rest) > 0; {
		frag = rest[:min(len(rest), max)]
		rest = rest[len(frag):]
		_ = c.wfr.WriteContinuation(st.id, len(rest) == 0, frag)
	}
	if cap(c.hbuf) > 64<<10 {
		c.hbuf = nil
	}
	c.work.Signal()
	if end {
		c.sentEndLocked(st)
	}
	return nil
}

// writeData queues p as DATA frames of st, as far as the stream's and the
// connection's send windows and the pending buffer's room allow, waiting
// for them to grow for the rest; end sets END_STREAM on the last.
// A DATA frame of st still last in the pending buffer is extended rather
// than a new one begun.
func (c *conn) writeData(st *stream, p []byte, end bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if err := c.streamErrLocked(st); err != nil {
			return err
		}
		if len(p) == 0 && !end {
			return nil
		}
		// What fits the windows and the pending buffer's room: a
		// large write is queued a bufferful at a time, so the pending
		// buffer keeps its pooled size and a response is never
		// copied whole.
		room := int64(c.srv.maxPending() - len(c.pending))
		n := min(int64(len(p)), st.sendWindow, c.sendWindow, room)
		if (len(p) > 0 && n <= 0) || room <= 0 {
			c.room.Wait()
			continue
		}
		last := int(n) == len(p)
		c.appendDataLocked(st.id, p[:n], last && end)
		st.sendWindow -= n
		c.sendWindow -= n
		p = p[n:]
		c.work.Signal()
		if last {
			if end {
				c.sentEndLocked(st)
			}
			return nil
		}
	}
}

// appendDataLocked queues p as DATA of stream id: into the last pending
// frame when that is an open DATA frame of id with room, else into new
// frames of at most maxDataMerge (or the peer's frame size).
func (c *conn) appendDataLocked(id uint32, p []byte, end bool) {
	c.ensurePendingLocked()
	limit := min(maxDataMerge, c.peerMaxFrame)
	for {
		if c.tailID == id {
			hdr := c.pending[c.tailOff : c.tailOff+frameHeaderLen]
			size := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
			if room := limit - size; room > 0 {
				k := min(room, len(p))
				c.pending = append(c.pending, p[:k]...)
				size += k
				hdr[0], hdr[1], hdr[2] = byte(size>>16), byte(size>>8), byte(size)
				p = p[k:]
				if len(p) == 0 {
					if end {
						hdr[4] |= byte(http2.FlagDataEndStream)
						c.tailID = 0
					}
					return
				}
			}
		}
		k := min(limit, len(p))
		c.tailOff = len(c.pending)
		var flags byte
		if end && k == len(p) {
			flags = byte(http2.FlagDataEndStream)
		}
		c.pending = append(c.pending, byte(k>>16), byte(k>>8), byte(k), byte(http2.FrameData), flags,
			byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
		c.pending = append(c.pending, p[:k]...)
		p = p[k:]
		c.tailID = id
		if flags != 0 {
			c.tailID = 0
			return
		}
		if len(p) == 0 {
			return
		}
	}
}

// sentEndLocked notes that st's response has ended (END_STREAM queued):
// once the client's side has ended too, the stream is closed.
func (c *conn) sentEndLocked(st *stream) {
	if st.remoteDone {
		c.endStreamLocked(st, errHandlerDone)
	}
}

// ensurePendingLocked gives the connection a pending buffer.
func (c *conn) ensurePendingLocked() {
	if c.pending == nil {
		c.pending = c.srv.getBuffer()
	}
}

// writeLoop is the connection's writer: it takes every frame pending and
// writes them in one Write of the TLS connection, until the connection
// closes; then it closes the TLS connection.
func (c *conn) writeLoop() {
	defer close(c.writerDone)
	c.mu.Lock()
	for {
		if len(c.pending) == 0 && !c.closing {
			for len(c.pending) == 0 && !c.closing {
				c.work.Wait()
			}
			// Woken by the first frame of a burst: the goroutines
			// that woke with its writer (the other watches of an
			// event) run first and queue theirs, so that the burst
			// goes out in one write.
			c.mu.Unlock()
			runtime.Gosched()
			c.mu.Lock()
		}
		if len(c.pending) == 0 {
			break
		}
		batch := c.pending
		c.pending, c.tailID = nil, 0
		c.room.Broadcast()
		c.mu.Unlock()
		_, err := c.tc.Write(batch)
		c.srv.putBuffer(batch)
		c.mu.Lock()
		if err != nil {
			c.pending = nil
			c.closeLocked(errConnClosed)
			break
		}
	}
	c.srv.putBuffer(c.pending)
	c.pending = nil
	c.mu.Unlock()
	_ = c.tc.Close()
}

func hpackField(f field) hpack.HeaderField { return hpack.HeaderField{Name: f.name, Value: f.value} }
