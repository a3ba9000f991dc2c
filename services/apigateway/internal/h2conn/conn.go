package h2conn

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// conn is one HTTP/2 connection. The serve goroutine reads and handles
// every frame the client sends; each stream's handler runs on a goroutine
// of its own; the writer goroutine (writeLoop) sends what they queue.
//
// Locking: mu guards everything below it, including each stream's fields
// marked "guarded by c.mu". A stream's body has a lock of its own
// (stream.bmu), never held while mu is taken nor the other way around.
type conn struct {
	srv     *Server
	tc      *tls.Conn
	handler http.Handler
	log     *slog.Logger
	// ctx is the parent of every stream's context; cancel ends it when
	// the connection ends.
	ctx    context.Context
	cancel context.CancelFunc
	// tlsState and remoteAddr are every request's TLS and RemoteAddr.
	tlsState   *tls.ConnectionState
	remoteAddr string
	// fr reads frames; the serve goroutine only.
	fr *http2.Framer

	mu sync.Mutex
	// room is signalled (Broadcast) when a stream's Write may go on: a
	// window grew, the pending buffer was taken, a stream or the
	// connection ended.
	room sync.Cond
	// work wakes the writer: frames were queued or the connection is
	// closing.
	work    sync.Cond
	streams map[uint32]*stream
	// handlers counts the handlers running, those of streams that have
	// ended (reset) among them: the bound MaxConcurrentStreams puts on
	// a connection's goroutines.
	handlers uint32
	// maxStreamID is the highest stream id the client has opened.
	maxStreamID uint32
	// sendWindow is the connection's send window; initialSendWindow the
	// peer's SETTINGS_INITIAL_WINDOW_SIZE; peerMaxFrame its
	// SETTINGS_MAX_FRAME_SIZE.
	sendWindow        int64
	initialSendWindow int64
	peerMaxFrame      int
	// recvWindow is what the client may still send on the connection;
	// recvUnacked what handlers have consumed (or was discarded) and not
	// yet been given back with a WINDOW_UPDATE.
	recvWindow  int32
	recvUnacked int32
	// streamRecvWindow is a new stream's receive window: the protocol's
	// initial one until the client acknowledges the server's SETTINGS,
	// then Server.StreamWindow.
	streamRecvWindow int32
	// pending holds the frames queued for the writer, in order; tailID
	// and tailOff locate its last frame when that is an open DATA frame
	// (no END_STREAM) a later write of stream tailID may extend.
	pending []byte
	tailID  uint32
	tailOff int
	// wfr writes control and header frames into pending (pendingWriter);
	// henc and hbuf encode header blocks.
	wfr  *http2.Framer
	henc *hpack.Encoder
	hbuf []byte
	// goingAway is set once a GOAWAY was queued: no stream opens after.
	goingAway bool
	// closing is set when the connection ends: the writer sends what is
	// queued and closes it; err says why streams can no longer write.
	closing bool
	err     error
	// idle closes the connection after IdleTimeout without streams.
	idle *time.Timer
	// writerDone is closed when the writer has closed the connection.
	writerDone chan struct{}
}

// Errors that a stream's Write or body Read returns.
var (
	errConnClosed   = errors.New("h2conn: connection closed")
	errStreamClosed = errors.New("h2conn: stream closed")
	errBodyClosed   = errors.New("h2conn: request body closed")
	errHandlerDone  = errors.New("h2conn: handler returned")
)

func newConn(s *Server, tc *tls.Conn, h http.Handler) *conn {
	base := context.Background()
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		base = bc.BaseContext()
	}
	ctx, cancel := context.WithCancel(base)
	st := tc.ConnectionState()
	c := &conn{
		srv:               s,
		tc:                tc,
		handler:           h,
		log:               s.logger(),
		ctx:               ctx,
		cancel:            cancel,
		tlsState:          &st,
		remoteAddr:        tc.RemoteAddr().String(),
		streams:           map[uint32]*stream{},
		sendWindow:        initialWindow,
		initialSendWindow: initialWindow,
		peerMaxFrame:      minMaxFrameSize,
		recvWindow:        s.connWindow(),
		streamRecvWindow:  initialWindow,
		writerDone:        make(chan struct{}),
	}
	c.room.L = &c.mu
	c.work.L = &c.mu
	c.fr = http2.NewFramer(nil, bufio.NewReaderSize(tc, 8<<10))
	c.fr.SetMaxReadFrameSize(s.maxReadFrameSize())
	c.fr.MaxHeaderListSize = s.maxHeaderListSize()
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.SetReuseFrames()
	c.wfr = http2.NewFramer((*pendingWriter)(c), nil)
	c.henc = hpack.NewEncoder((*headerWriter)(c))
	return c
}

// serve runs the connection: the preface both ways, then every frame
// the client sends, until the connection ends.
func (c *conn) serve() {
	defer c.shut()
	go c.writeLoop()
	c.mu.Lock()
	_ = c.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.srv.maxConcurrentStreams()},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: c.srv.maxReadFrameSize()},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(c.srv.streamWindow())},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.srv.maxHeaderListSize()},
	)
	if d := c.srv.connWindow() - initialWindow; d > 0 {
		_ = c.wfr.WriteWindowUpdate(0, uint32(d))
	}
	c.armIdleLocked()
	c.mu.Unlock()

	_ = c.tc.SetReadDeadline(time.Now().Add(prefaceTimeout))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.tc, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		c.log.Debug("h2conn: bad client preface", "remote", c.remoteAddr, "err", err)
		return
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.readFailed(err)
		return
	}
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		c.connError(http2.ErrCodeProtocol, "first frame is not SETTINGS")
		return
	}
	_ = c.tc.SetReadDeadline(time.Time{})
	for {
		if err := c.processFrame(f); err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.connError(http2.ErrCode(ce), err.Error())
			}
			return
		}
		for f, err = c.fr.ReadFrame(); err != nil; f, err = c.fr.ReadFrame() {
			if !c.readFailed(err) {
				return
			}
		}
	}
}

// prefaceTimeout bounds the wait for the client's preface and SETTINGS.
const prefaceTimeout = 10 * time.Second

// readFailed handles an error of ReadFrame: a stream error resets the
// stream and reading goes on (true); any other ends the connection,
// after a GOAWAY for a protocol error.
func (c *conn) readFailed(err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		if err := c.checkBacklog(); err != nil {
			c.connError(http2.ErrCodeEnhanceYourCalm, err.Error())
			return false
		}
		c.resetStream(se.StreamID, se.Code)
		return true
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.connError(http2.ErrCodeFrameSize, err.Error())
	case errors.As(err, &ce):
		c.connError(http2.ErrCode(ce), fmt.Sprint(c.fr.ErrorDetail()))
	default:
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			c.log.Debug("h2conn: read", "remote", c.remoteAddr, "err", err)
		}
	}
	return false
}

// connError ends the connection with a GOAWAY of code (RFC 9113 §5.4.1).
func (c *conn) connError(code http2.ErrCode, detail string) {
	c.log.Debug("h2conn: connection error", "remote", c.remoteAddr, "code", code, "detail", detail)
	c.mu.Lock()
	if !c.closing {
		_ = c.wfr.WriteGoAway(c.maxStreamID, code, nil)
		c.goingAway = true
	}
	c.closeLocked(fmt.Errorf("%w: %v", errConnClosed, code))
	c.mu.Unlock()
}

// goAway starts a graceful close: a GOAWAY naming the last stream
// opened; the connection closes when its streams have ended.
func (c *conn) goAway() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goingAway || c.closing {
		return
	}
	c.goingAway = true
	_ = c.wfr.WriteGoAway(c.maxStreamID, http2.ErrCodeNo, nil)
	c.work.Signal()
	if len(c.streams) == 0 {
		c.closeLocked(errConnClosed)
	}
}

// closeLocked ends the connection: streams can no longer write, the
// writer sends what is queued (the GOAWAY among it) and closes the TLS
// connection, which ends the serve goroutine's read.
func (c *conn) closeLocked(err error) {
	if c.closing {
		return
	}
	c.closing = true
	c.err = err
	if c.idle != nil {
		c.idle.Stop()
	}
	c.room.Broadcast()
	c.work.Signal()
}

// shut runs when the serve goroutine ends: the connection closes (after
// what is queued, bounded by closeTimeout), and every stream's context
// and body end.
func (c *conn) shut() {
	c.mu.Lock()
	c.closeLocked(errConnClosed)
	streams := make([]*stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	c.mu.Unlock()
	// Each stream's context ends by its own stop first, which runs its
	// hook (streamCtx); the connection's cancel would end it from above,
	// past the hook.
	for _, st := range streams {
		st.ctx.stop(errConnClosed)
	}
	c.cancel()
	for _, st := range streams {
		st.bodyFail(errConnClosed)
	}
	// A peer that reads nothing must not keep the writer (and the
	// connection) forever. net/http closes the connection when serve
	// returns: the writer sends what is queued (a GOAWAY) first.
	_ = c.tc.SetWriteDeadline(time.Now().Add(closeTimeout))
	<-c.writerDone
}

// closeTimeout bounds how long a closing connection tries to send what is
// queued.
const closeTimeout = time.Second

// armIdleLocked starts the idle timer; the connection has no stream.
func (c *conn) armIdleLocked() {
	d := c.srv.idleTimeout()
	if d < 0 || c.closing {
		return
	}
	if c.idle == nil {
		c.idle = time.AfterFunc(d, c.idleExpired)
		return
	}
	c.idle.Reset(d)
}

// idleExpired closes the connection if it still has no stream.
func (c *conn) idleExpired() {
	c.mu.Lock()
	idle := len(c.streams) == 0
	c.mu.Unlock()
	if idle {
		c.goAway()
	}
}

// processFrame handles one frame from the client; an error it returns
// ends the connection (a ConnectionError after a GOAWAY of its code).
func (c *conn) processFrame(f http2.Frame) error {
	if err := c.checkBacklog(); err != nil {
		return err
	}
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.processHeaders(f)
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.SettingsFrame:
		return c.processSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		if f.StreamID != 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		_ = c.wfr.WritePing(true, f.Data)
		c.work.Signal()
		return nil
	case *http2.RSTStreamFrame:
		return c.processReset(f)
	case *http2.GoAwayFrame:
		// The client opens no more streams; those it has go on.
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	default:
		// PRIORITY and unknown frame types are ignored.
		return nil
	}
}

// checkBacklog refuses to process another frame from the client when the
// pending buffer is far over its bound. Responses wait for room in it,
// but answers to the client's frames (PING and SETTINGS
// acknowledgements, RST_STREAM for malformed or refused streams,
// WINDOW_UPDATEs) are queued without waiting, and a client that sends
// such frames and reads nothing would grow it without end. Every frame
// read passes here first, so the buffer stays within the bound plus the
// answers to one frame.
func (c *conn) checkBacklog() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) > maxBacklog*c.srv.maxPending() {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	return nil
}

// maxBacklog is how many times the pending buffer's bound the frames
// queued for an unread connection may reach before it is closed.
const maxBacklog = 4

// processSettings applies the client's settings and acknowledges them.
func (c *conn) processSettings(f *http2.SettingsFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.IsAck() {
		// The client now counts the server's initial window for every
		// stream (RFC 9113 §6.9.2).
		delta := c.srv.streamWindow() - c.streamRecvWindow
		c.streamRecvWindow += delta
		for _, st := range c.streams {
			st.recvWindow += delta
		}
		return nil
	}
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			// RFC 9113 §6.9.2: the difference applies to every open
			// stream's window.
			delta := int64(s.Val) - c.initialSendWindow
			c.initialSendWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			c.room.Broadcast()
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_ = c.wfr.WriteSettingsAck()
	c.work.Signal()
	return nil
}

// processWindowUpdate grows the connection's or a stream's send window.
func (c *conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.room.Broadcast()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxStreamID {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil // a stream that has ended
	}
	st.sendWindow += int64(f.Increment)
	if st.sendWindow > maxWindow {
		c.resetLocked(st, http2.ErrCodeFlowControl)
		return nil
	}
	c.room.Broadcast()
	return nil
}

// processReset ends a stream the client reset.
func (c *conn) processReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	st := c.streams[f.StreamID]
	if st == nil {
		idle := f.StreamID > c.maxStreamID
		c.mu.Unlock()
		if idle {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil
	}
	err := fmt.Errorf("%w: reset by the client: %v", errStreamClosed, f.ErrCode)
	c.endStreamLocked(st, err)
	c.mu.Unlock()
	st.abort(err)
	return nil
}

// resetStream resets stream id with code (a stream error).
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	st := c.streams[id]
	if st == nil {
		if !c.closing {
			_ = c.wfr.WriteRSTStream(id, code)
			c.work.Signal()
		}
		c.mu.Unlock()
		return
	}
	c.resetLocked(st, code)
	c.mu.Unlock()
}

// resetLocked sends RST_STREAM for st and ends it; its handler's context
// and body end.
func (c *conn) resetLocked(st *stream, code http2.ErrCode) {
	if !c.closing {
		_ = c.wfr.WriteRSTStream(st.id, code)
		c.work.Signal()
	}
	err := fmt.Errorf("%w: reset: %v", errStreamClosed, code)
	c.endStreamLocked(st, err)
	// The context and body end off the lock: they take locks of their
	// own, and the body's is never taken under c.mu.
	go st.abort(err)
}

// endStreamLocked removes st from the open streams: it writes nothing
// more, and its unread body gives back its connection window.
func (c *conn) endStreamLocked(st *stream, err error) {
	if st.closed {
		return
	}
	st.closed = true
	st.err = err
	delete(c.streams, st.id)
	c.refundLocked(nil, st.unread)
	st.unread = 0
	c.room.Broadcast()
	if len(c.streams) == 0 {
		if c.goingAway {
			c.closeLocked(errConnClosed)
		} else {
			c.armIdleLocked()
		}
	}
}

// refundLocked gives back n bytes of receive window, consumed by st's
// handler (nil: the connection's only, for data no stream will read):
// a WINDOW_UPDATE goes out once half a window has been consumed.
func (c *conn) refundLocked(st *stream, n int32) {
	if n <= 0 || c.closing {
		return
	}
	c.recvUnacked += n
	if w := c.srv.connWindow(); c.recvUnacked >= w/2 {
		_ = c.wfr.WriteWindowUpdate(0, uint32(c.recvUnacked))
		c.recvWindow += c.recvUnacked
		c.recvUnacked = 0
		c.work.Signal()
	}
	if st == nil || st.closed || st.remoteDone {
		return
	}
	st.recvUnacked += n
	if w := c.srv.streamWindow(); st.recvUnacked >= w/2 {
		_ = c.wfr.WriteWindowUpdate(st.id, uint32(st.recvUnacked))
		st.recvWindow += st.recvUnacked
		st.recvUnacked = 0
		c.work.Signal()
	}
}

// processData hands a DATA frame's payload to its stream's body.
func (c *conn) processData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int32(f.Header().Length)
	data := f.Data()
	c.mu.Lock()
	if n > c.recvWindow {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWindow -= n
	st := c.streams[id]
	if st == nil || st.remoteDone {
		c.refundLocked(nil, n)
		idle := id > c.maxStreamID
		c.mu.Unlock()
		if idle {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if st != nil {
			c.resetStream(id, http2.ErrCodeStreamClosed)
		}
		return nil
	}
	if n > st.recvWindow {
		c.refundLocked(nil, n)
		c.resetLocked(st, http2.ErrCodeFlowControl)
		c.mu.Unlock()
		return nil
	}
	st.recvWindow -= n
	// Padding is consumed at once.
	c.refundLocked(st, n-int32(len(data)))
	st.received += int64(len(data))
	if st.declared >= 0 && (st.received > st.declared || f.StreamEnded() && st.received != st.declared) {
		c.refundLocked(nil, int32(len(data)))
		c.resetLocked(st, http2.ErrCodeProtocol)
		c.mu.Unlock()
		return nil
	}
	if f.StreamEnded() {
		st.remoteDone = true
	}
	st.unread += int32(len(data))
	c.mu.Unlock()
	st.bodyWrite(data, f.StreamEnded())
	return nil
}

// pendingWriter appends what the Framer writes to the pending frames;
// c.mu is held.
type pendingWriter conn

func (w *pendingWriter) Write(p []byte) (int, error) {
	c := (*conn)(w)
	c.ensurePendingLocked()
	c.pending = append(c.pending, p...)
	c.tailID = 0
	return len(p), nil
}

// headerWriter collects the encoded header block; c.mu is held.
type headerWriter conn

func (w *headerWriter) Write(p []byte) (int, error) {
	w.hbuf = append(w.hbuf, p...)
	return len(p), nil
}
