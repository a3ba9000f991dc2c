// Package h2conn serves HTTP/2 connections (RFC 9113) to an http.Handler,
// in place of net/http's HTTP/2 server, for the gateway's HTTPS API.
//
// What it does differently: each connection has one writer goroutine, and
// every frame any stream sends (headers, data, control frames) is encoded
// straight into the connection's pending buffer under the connection's
// lock; the writer takes everything pending at once and hands it to the
// TLS connection in one Write, so an event written to the ten watches of
// a connection costs one TLS record and one system call, not ten flushes
// handed over through the connection's serve loop. A stream holds no
// write buffer once its response headers are out: a response's bytes go
// into the pending buffer as DATA frames when written (adjacent writes of
// one stream share a frame), within the peer's stream and connection
// flow-control windows, and Write blocks while either is exhausted or the
// pending buffer is full.
//
// Frames are read and written with golang.org/x/net/http2's Framer and
// header blocks compressed with its hpack package. HTTP/1.1 stays with
// net/http: Configure plugs a Server into an http.Server through
// TLSNextProto["h2"].
package h2conn

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Defaults of the Server's zero fields.
const (
	// DefaultMaxConcurrentStreams is the streams a client may have open
	// on one connection (kube-apiserver's --http2-max-streams-per-connection).
	DefaultMaxConcurrentStreams = 1000
	// DefaultMaxHeaderListSize bounds a request's decoded header list.
	DefaultMaxHeaderListSize = 1 << 20
	// DefaultStreamWindow is the receive window of a stream's request
	// body: the bytes of body buffered for a handler that has not read
	// them.
	DefaultStreamWindow = 1 << 20
	// DefaultConnWindow is the receive window of a connection.
	DefaultConnWindow = 1 << 20
	// DefaultIdleTimeout closes a connection without streams.
	DefaultIdleTimeout = 90 * time.Second
	// DefaultMaxReadFrameSize is the largest frame a client may send.
	DefaultMaxReadFrameSize = 1 << 20
	// DefaultMaxPending bounds the bytes queued on a connection for its
	// writer: a stream's Write waits while it is full.
	DefaultMaxPending = 128 << 10
)

// Server serves HTTP/2 connections. Its fields are read when a connection
// starts; set them before the first. The zero value serves with the
// defaults above.
type Server struct {
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS: a stream
	// opened beyond it is refused (RST_STREAM REFUSED_STREAM).
	MaxConcurrentStreams uint32
	// MaxHeaderListSize is SETTINGS_MAX_HEADER_LIST_SIZE: a request whose
	// header list is larger is answered 431.
	MaxHeaderListSize uint32
	// StreamWindow and ConnWindow are the receive windows of a request
	// body and of a connection.
	StreamWindow int32
	ConnWindow   int32
	// IdleTimeout closes (GOAWAY) a connection that has had no open
	// stream for that long; < 0: never.
	IdleTimeout time.Duration
	// MaxReadFrameSize is SETTINGS_MAX_FRAME_SIZE.
	MaxReadFrameSize uint32
	// MaxPending bounds the bytes queued for a connection's writer.
	MaxPending int
	// Logger logs handler panics and connection errors (at debug); nil
	// means slog.Default().
	Logger *slog.Logger

	mu sync.Mutex
	// conns are the connections being served; shutdown is set once
	// Shutdown was called, after which no connection is served.
	conns    map[*conn]struct{}
	shutdown bool
	buffers  sync.Pool // of *[]byte of the pending buffers' capacity
	firsts   sync.Pool // of *[]byte of firstSize
}

// Configure makes hs serve HTTP/2 over TLS with s: it adds "h2" to the
// ALPN protocols of hs.TLSConfig (made when nil), installs s in
// hs.TLSNextProto and has hs.Shutdown send every connection a GOAWAY
// (Shutdown). hs.Close closes the connections as it closes HTTP/1.1 ones.
func Configure(hs *http.Server, s *Server) {
	if hs.TLSConfig == nil {
		hs.TLSConfig = &tls.Config{}
	}
	if !slices.Contains(hs.TLSConfig.NextProtos, "h2") {
		hs.TLSConfig.NextProtos = append([]string{"h2"}, hs.TLSConfig.NextProtos...)
	}
	if !slices.Contains(hs.TLSConfig.NextProtos, "http/1.1") {
		hs.TLSConfig.NextProtos = append(hs.TLSConfig.NextProtos, "http/1.1")
	}
	if hs.TLSNextProto == nil {
		hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	hs.TLSNextProto["h2"] = s.ServeConn
	hs.RegisterOnShutdown(s.Shutdown)
}

// ServeConn serves the HTTP/2 connection tc, whose TLS handshake has
// negotiated "h2", with h until the connection ends. Its signature is
// http.Server.TLSNextProto's: h is then net/http's handler for the
// connection, whose BaseContext (when it has one) is the requests'
// parent context.
func (s *Server) ServeConn(_ *http.Server, tc *tls.Conn, h http.Handler) {
	// The writer coalesces what it sends (writeLoop): a connection
	// beneath that would coalesce again on a goroutine of its own writes
	// through instead (coalesce.Conn).
	if d, ok := tc.NetConn().(interface{ Direct() }); ok {
		d.Direct()
	}
	c := newConn(s, tc, h)
	if !s.track(c) {
		_ = tc.Close()
		return
	}
	defer s.untrack(c)
	c.serve()
}

// Shutdown starts a graceful shutdown of every connection: each is sent a
// GOAWAY, refuses new streams, and closes once the streams it has end.
// Connections that start later are closed at once.
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.shutdown = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
}

// track adds c to the served connections, unless the server is shutting
// down.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// orDefault is v, or def when v is not positive.
func orDefault[T ~int | ~int32 | ~uint32](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func (s *Server) maxConcurrentStreams() uint32 {
	return orDefault(s.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
}

func (s *Server) maxHeaderListSize() uint32 {
	return orDefault(s.MaxHeaderListSize, DefaultMaxHeaderListSize)
}

func (s *Server) streamWindow() int32 { return orDefault(s.StreamWindow, DefaultStreamWindow) }

func (s *Server) connWindow() int32 {
	if s.ConnWindow <= 0 {
		return DefaultConnWindow
	}
	return max(s.ConnWindow, initialWindow)
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout == 0 {
		return DefaultIdleTimeout
	}
	return s.IdleTimeout
}

func (s *Server) maxReadFrameSize() uint32 {
	if s.MaxReadFrameSize < minMaxFrameSize || s.MaxReadFrameSize > maxMaxFrameSize {
		return DefaultMaxReadFrameSize
	}
	return s.MaxReadFrameSize
}

func (s *Server) maxPending() int { return orDefault(s.MaxPending, DefaultMaxPending) }

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// bufferSize is a pending buffer's capacity: the bound on queued data and
// the one DATA frame that may cross it.
func (s *Server) bufferSize() int { return s.maxPending() + frameHeaderLen + maxDataMerge }

// getBuffer returns an empty pending buffer from the pool.
func (s *Server) getBuffer() []byte {
	if b, ok := s.buffers.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, s.bufferSize())
}

// putBuffer returns b to the pool unless it grew past the usual size.
func (s *Server) putBuffer(b []byte) {
	if b == nil || cap(b) > 2*s.bufferSize() {
		return
	}
	b = b[:0]
	s.buffers.Put(&b)
}

// getFirst returns an empty buffer for a response's first bytes.
func (s *Server) getFirst() []byte {
	if b, ok := s.firsts.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, firstSize)
}

// putFirst returns b, from getFirst, to the pool.
func (s *Server) putFirst(b []byte) {
	if cap(b) != firstSize {
		return
	}
	b = b[:0]
	s.firsts.Put(&b)
}

// Protocol constants (RFC 9113).
const (
	frameHeaderLen  = 9
	initialWindow   = 65535
	minMaxFrameSize = 1 << 14
	maxMaxFrameSize = 1<<24 - 1
	maxWindow       = 1<<31 - 1
	// maxDataMerge bounds the DATA frames this server writes (within
	// the peer's SETTINGS_MAX_FRAME_SIZE): adjacent writes of a stream
	// share a frame up to this size.
	maxDataMerge = 1 << 14
)
