package h2conn

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawConn is a client speaking HTTP/2 frames directly.
type rawConn struct {
	t    *testing.T
	tc   *tls.Conn
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
}

// dialRaw connects, sends the preface and an empty SETTINGS, and reads
// the server's SETTINGS.
func dialRaw(t *testing.T, ts *httptest.Server) *rawConn {
	t.Helper()
	return dialRawBuffer(t, ts, 0)
}

// dialRawBuffer is dialRaw with the client's socket receive buffer set
// to rcvbuf bytes (0: the system's). A flood test's client reads
// nothing: a small buffer fills after a few thousand answers, not the
// megabytes loopback's autotuned buffers take to fill, so the server's
// bound is reached early even under -race on a busy machine.
//
// The buffer is set before the connection is made (the dialer's Control),
// not on the connected socket: shrinking it there shrinks the window the
// client already offered, and Linux then drops the server's segments
// beyond the new edge whole, ACKs of the client's own data included, so
// a client that writes and reads nothing could wait for those ACKs until
// retransmission backs off, long after the server closed.
func dialRawBuffer(t *testing.T, ts *httptest.Server, rcvbuf int) *rawConn {
	t.Helper()
	d := net.Dialer{}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	nc, err := d.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(nc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q", p)
	}
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawConn{t: t, tc: tc, fr: http2.NewFramer(tc, tc)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.AllowIllegalWrites = true
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := tc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f := c.read()
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		t.Fatalf("first frame %v", f)
	}
	return c
}

func (c *rawConn) read() http2.Frame {
	c.t.Helper()
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	return f
}

// headers sends a GET's HEADERS on stream id, with extra fields.
func (c *rawConn) headers(id uint32, end bool, extra ...string) {
	c.t.Helper()
	c.hbuf.Reset()
	fields := append([]string{":method", "GET", ":scheme", "https", ":authority", "x", ":path", "/"}, extra...)
	for i := 0; i < len(fields); i += 2 {
		_ = c.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

// until reads frames until match returns true for one.
func (c *rawConn) until(match func(http2.Frame) bool) http2.Frame {
	c.t.Helper()
	for {
		if f := c.read(); match(f) {
			return f
		}
	}
}

// goAway reads frames until a GOAWAY and returns its code.
func (c *rawConn) goAway() http2.ErrCode {
	c.t.Helper()
	return c.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame).ErrCode
}

func TestMaxConcurrentStreams(t *testing.T) {
	release := make(chan struct{})
	ts := newServer(t, &Server{MaxConcurrentStreams: 2}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	c := dialRaw(t, ts)
	c.headers(1, true)
	c.headers(3, true)
	c.headers(5, true)
	f := c.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	if f.StreamID != 5 || f.ErrCode != http2.ErrCodeRefusedStream {
		t.Errorf("got RST_STREAM %d %v, want 5 REFUSED_STREAM", f.StreamID, f.ErrCode)
	}
	close(release)
	// Once the first two end, a new stream is served.
	ended := 0
	c.until(func(f http2.Frame) bool {
		if f.Header().Flags.Has(http2.FlagDataEndStream) && (f.Header().Type == http2.FrameData || f.Header().Type == http2.FrameHeaders) {
			ended++
		}
		return ended == 2
	})
	c.headers(7, true)
	h := c.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
	if h.StreamID != 7 || h.PseudoValue("status") != "200" {
		t.Errorf("stream 7: %d %s", h.StreamID, h.PseudoValue("status"))
	}
}

func TestProtocolErrors(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for _, tc := range []struct {
		name string
		send func(c *rawConn)
		want http2.ErrCode
	}{
		{"data on stream 0", func(c *rawConn) { _ = c.fr.WriteData(0, false, []byte("x")) }, http2.ErrCodeProtocol},
		{"even stream id", func(c *rawConn) { c.headers(2, true) }, http2.ErrCodeProtocol},
		{"stream id going back", func(c *rawConn) { c.headers(5, true); c.headers(3, true) }, http2.ErrCodeProtocol},
		{"data on an idle stream", func(c *rawConn) { _ = c.fr.WriteData(9, false, []byte("x")) }, http2.ErrCodeProtocol},
		{"frame too large", func(c *rawConn) {
			_ = c.fr.WriteRawFrame(http2.FrameData, 0, 1, make([]byte, DefaultMaxReadFrameSize+1))
		}, http2.ErrCodeFrameSize},
		{"connection window overflow", func(c *rawConn) { _ = c.fr.WriteWindowUpdate(0, 1<<31-1) }, http2.ErrCodeFlowControl},
		{"window update of 0", func(c *rawConn) { _ = c.fr.WriteWindowUpdate(0, 0) }, http2.ErrCodeProtocol},
		{"bad setting", func(c *rawConn) {
			_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, http2.ErrCodeFlowControl},
		{"continuation without headers", func(c *rawConn) { _ = c.fr.WriteContinuation(1, true, []byte{0x82}) }, http2.ErrCodeProtocol},
		{"bad hpack", func(c *rawConn) {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, http2.ErrCodeCompression},
		{"push promise", func(c *rawConn) {
			_ = c.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: []byte{0x82}, EndHeaders: true})
		}, http2.ErrCodeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newServer(t, &Server{}, ok)
			c := dialRaw(t, ts)
			tc.send(c)
			if got := c.goAway(); got != tc.want {
				t.Errorf("GOAWAY %v, want %v", got, tc.want)
			}
			// Then the connection closes.
			for {
				if _, err := c.fr.ReadFrame(); err != nil {
					break
				}
			}
		})
	}
}

func TestStreamErrors(t *testing.T) {
	ts := newServer(t, &Server{MaxHeaderListSize: 1 << 10}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
	}))
	c := dialRaw(t, ts)
	isReset := func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }
	// A connection-specific header makes the request malformed.
	c.headers(1, true, "connection", "keep-alive")
	if f := c.until(isReset).(*http2.RSTStreamFrame); f.StreamID != 1 || f.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("connection header: RST %d %v", f.StreamID, f.ErrCode)
	}
	// No :path.
	c.hbuf.Reset()
	for _, hf := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"}} {
		_ = c.henc.WriteField(hf)
	}
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	if f := c.until(isReset).(*http2.RSTStreamFrame); f.StreamID != 3 || f.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("no :path: RST %d %v", f.StreamID, f.ErrCode)
	}
	// A body longer than its Content-Length.
	c.headers(5, false, "content-length", "2")
	_ = c.fr.WriteData(5, true, []byte("abc"))
	if f := c.until(isReset).(*http2.RSTStreamFrame); f.StreamID != 5 || f.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("content-length: RST %d %v", f.StreamID, f.ErrCode)
	}
	// Headers over the limit: 431.
	c.headers(7, true, "x-big", strings.Repeat("a", 600), "x-big2", strings.Repeat("b", 600))
	h := c.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
	if h.StreamID != 7 || h.PseudoValue("status") != "431" {
		t.Errorf("big headers: stream %d status %s", h.StreamID, h.PseudoValue("status"))
	}
	// The connection is still good: PING is answered.
	_ = c.fr.WritePing(false, [8]byte{1, 2, 3})
	if p := c.until(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame); !p.IsAck() || p.Data != [8]byte{1, 2, 3} {
		t.Errorf("ping answer %v", p)
	}
}

func TestIdleTimeout(t *testing.T) {
	ts := newServer(t, &Server{IdleTimeout: 50 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	c := dialRaw(t, ts)
	c.headers(1, true)
	if got := c.goAway(); got != http2.ErrCodeNo {
		t.Errorf("GOAWAY %v", got)
	}
}

// TestOneEndStream: a response ends once, whether the request's body
// ended with its HEADERS or later, and whatever the response's shape.
func TestOneEndStream(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/flushed", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
		w.(http.Flusher).Flush()
	})
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		w.Header().Set("X-T", "1")
	})
	ts := newServer(t, &Server{}, mux)
	c := dialRaw(t, ts)
	id := uint32(1)
	for _, path := range []string{"/empty", "/small", "/flushed", "/trailers"} {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			bodyLater := method == "POST"
			c.hbuf.Reset()
			for _, hf := range []hpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "x"}, {Name: ":path", Value: path}} {
				_ = c.henc.WriteField(hf)
			}
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: !bodyLater, EndHeaders: true})
			ends := 0
			c.until(func(f http2.Frame) bool {
				if f.Header().StreamID != id {
					return false
				}
				if f.Header().Flags.Has(http2.FlagDataEndStream) && (f.Header().Type == http2.FrameData || f.Header().Type == http2.FrameHeaders) {
					ends++
					if ends > 1 {
						t.Errorf("%s %s: %v after END_STREAM", method, path, f)
					}
				}
				if ends == 1 && bodyLater {
					// The server tells the client to stop sending.
					_, ok := f.(*http2.RSTStreamFrame)
					return ok
				}
				return ends == 1
			})
			// A PING round trip: anything sent for the stream after
			// its end would come before the answer.
			_ = c.fr.WritePing(false, [8]byte{byte(id)})
			c.until(func(f http2.Frame) bool {
				if f.Header().StreamID == id && (f.Header().Type == http2.FrameData || f.Header().Type == http2.FrameHeaders) {
					t.Errorf("%s %s: %v after END_STREAM", method, path, f)
				}
				p, ok := f.(*http2.PingFrame)
				return ok && p.Data[0] == byte(id)
			})
			id += 2
		}
	}
}

// TestPingFlood: a client that sends PINGs and reads nothing is cut off
// once the answers queued for it exceed the backlog bound.
func TestPingFlood(t *testing.T) {
	ts := newServer(t, &Server{MaxPending: 4 << 10}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	c := dialRawBuffer(t, ts, 4<<10)
	// Once cut off, the connection closes after the server's writer
	// gives up on what is queued (closeTimeout) and TLS's close_notify
	// (up to 5 s, crypto/tls): the client's writes block until then.
	_ = c.tc.SetDeadline(time.Now().Add(30 * time.Second))
	var err error
	for i := 0; i < 200_000 && err == nil; i++ {
		err = c.fr.WritePing(false, [8]byte{})
	}
	// The server closes the connection: reading what it sent ends in
	// an error that is not the test's deadline.
	for err == nil {
		_, err = c.fr.ReadFrame()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open: %v", err)
	}
}

// TestResetFlood: a client that opens malformed streams and reads
// nothing is cut off once the RST_STREAMs queued for it exceed the
// backlog bound, as for PINGs.
func TestResetFlood(t *testing.T) {
	ts := newServer(t, &Server{MaxPending: 4 << 10}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	c := dialRawBuffer(t, ts, 4<<10)
	// Once cut off, the connection closes after the server's writer
	// gives up on what is queued (closeTimeout) and TLS's close_notify
	// (up to 5 s, crypto/tls): the client's writes block until then.
	_ = c.tc.SetDeadline(time.Now().Add(30 * time.Second))
	var err error
	for id := uint32(1); id < 800_000 && err == nil; id += 2 {
		// A connection-specific header: each stream is reset.
		c.hbuf.Reset()
		for _, hf := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "x"}, {Name: ":path", Value: "/"}, {Name: "connection", Value: "close"}} {
			_ = c.henc.WriteField(hf)
		}
		err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	}
	for err == nil {
		_, err = c.fr.ReadFrame()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open: %v", err)
	}
}
