package h2conn

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// stream is one request and its response.
type stream struct {
	c  *conn
	id uint32
	// ctx is the request's context; its stop ends it when the handler
	// returns, the client resets the stream or the connection ends.
	ctx *streamCtx
	// trailer is the request's Trailer map (nil when it declares none),
	// filled by the request's trailers under bmu. The stream keeps no
	// other reference to its request: the handler's goroutine holds it,
	// so a detached response (Detach) does not keep it alive.
	trailer http.Header

	// Guarded by c.mu.
	//
	// closed is set when the stream has ended (response sent, reset by
	// either side, connection gone): it writes nothing more; err says
	// why. remoteDone is set once the client has ended its side
	// (END_STREAM).
	//
	// The two bools follow the int32s, where they take no padding: the
	// stream fits the 320-byte size class (an idle watch keeps it).
	err error
	// sendWindow is the stream's send window; recvWindow what the
	// client may still send of the body, recvUnacked what the handler
	// consumed and has not been given back, unread what was received
	// and not consumed.
	sendWindow  int64
	recvWindow  int32
	recvUnacked int32
	unread      int32
	closed      bool
	remoteDone  bool
	// declared is the request's Content-Length (-1 when not given),
	// received the body bytes so far.
	declared int64
	received int64

	// The request body, guarded by bmu: received bytes not yet read
	// (body[boff:]) and, once the client's side has ended or the stream
	// has, the error Read returns after them.
	bmu   sync.Mutex
	bcond sync.Cond
	body  []byte
	boff  int
	berr  error

	// The response, used by the handler's goroutine only (or, once
	// detached, by one goroutine at a time).
	resp response
	// ended is set by whichever ends the stream's response first: run,
	// or endDetached after a Detach.
	ended atomic.Bool
}

// processHeaders opens a stream for a request, or takes a request's
// trailers.
func (c *conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		// Trailers end the request body.
		if st.remoteDone {
			c.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		}
		if !f.StreamEnded() || st.declared >= 0 && st.received != st.declared {
			c.resetLocked(st, http2.ErrCodeProtocol)
			c.mu.Unlock()
			return nil
		}
		st.remoteDone = true
		c.mu.Unlock()
		st.setTrailers(f.RegularFields())
		st.bodyWrite(nil, true)
		return nil
	}
	if id <= c.maxStreamID {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.maxStreamID = id
	if c.goingAway {
		// Not processed: GOAWAY named an earlier last stream.
		c.mu.Unlock()
		return nil
	}
	if c.handlers >= c.srv.maxConcurrentStreams() {
		_ = c.wfr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
		c.work.Signal()
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()

	st := &stream{c: c, id: id, declared: -1}
	st.bcond.L = &st.bmu
	handler := c.handler
	req, err := st.newRequest(f)
	if err != nil {
		c.log.Debug("h2conn: malformed request", "remote", c.remoteAddr, "stream", id, "err", err)
		c.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}
	if f.Truncated {
		handler = http.HandlerFunc(headersTooLarge)
	}
	st.trailer = req.Trailer
	st.resp.init(st, req)

	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		st.ctx.stop(errConnClosed)
		return nil
	}
	st.sendWindow = c.initialSendWindow
	st.recvWindow = c.streamRecvWindow
	st.remoteDone = f.StreamEnded()
	c.streams[id] = st
	c.handlers++
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	go st.run(handler, req)
	return nil
}

// headersTooLarge answers a request whose header list was over the limit.
func headersTooLarge(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
}

// newRequest makes the stream's request from its HEADERS, and its
// context.
func (st *stream) newRequest(f *http2.MetaHeadersFrame) (*http.Request, error) {
	method := f.PseudoValue("method")
	path := f.PseudoValue("path")
	scheme := f.PseudoValue("scheme")
	authority := f.PseudoValue("authority")
	if f.PseudoValue("protocol") != "" {
		return nil, errors.New("extended CONNECT is not enabled")
	}
	if method == "" {
		return nil, errors.New("no :method")
	}
	var u *url.URL
	requestURI := path
	if method == http.MethodConnect {
		if path != "" || scheme != "" || authority == "" {
			return nil, errors.New("malformed CONNECT")
		}
		u = &url.URL{Host: authority}
		requestURI = authority
	} else {
		if path == "" || scheme == "" {
			return nil, errors.New("no :path or :scheme")
		}
		var err error
		if u, err = url.ParseRequestURI(path); err != nil {
			return nil, fmt.Errorf("bad :path: %w", err)
		}
	}
	fields := f.RegularFields()
	header := make(http.Header, len(fields))
	var cookies []string
	for _, hf := range fields {
		if connectionSpecific(hf.Name) {
			return nil, fmt.Errorf("connection-specific header %q", hf.Name)
		}
		switch hf.Name {
		case "te":
			if hf.Value != "trailers" {
				return nil, errors.New(`"te" other than "trailers"`)
			}
		case "cookie":
			// RFC 9113 §8.2.3: split cookies are joined for HTTP/1.1
			// handlers.
			cookies = append(cookies, hf.Value)
			continue
		}
		k := canonicalKey(hf.Name)
		header[k] = append(header[k], hf.Value)
	}
	if len(cookies) > 0 {
		header["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	if authority == "" {
		authority = header.Get("Host")
	}
	var body io.ReadCloser = http.NoBody
	contentLength := int64(0)
	if !f.StreamEnded() {
		body = (*requestBody)(st)
		contentLength = -1
		if cl := header.Get("Content-Length"); cl != "" {
			n, err := strconv.ParseUint(cl, 10, 63)
			if err != nil {
				return nil, fmt.Errorf("bad content-length %q", cl)
			}
			contentLength = int64(n)
			st.declared = contentLength
		}
	} else if cl := header.Get("Content-Length"); cl != "" && cl != "0" {
		return nil, errors.New("content-length on a request without a body")
	}
	var trailer http.Header
	for _, v := range header["Trailer"] {
		for key := range strings.SplitSeq(v, ",") {
			key = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(key))
			switch key {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				// Forbidden as trailers (RFC 9110 §6.5.1).
			default:
				if trailer == nil {
					trailer = make(http.Header)
				}
				trailer[key] = nil
			}
		}
	}
	delete(header, "Trailer")
	st.ctx = newStreamCtx(st.c.ctx)
	req, err := http.NewRequestWithContext(st.ctx, method, "", body)
	if err != nil {
		st.ctx.stop(err)
		return nil, err
	}
	req.URL = u
	req.RequestURI = requestURI
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	req.Header = header
	req.Trailer = trailer
	req.Host = authority
	req.ContentLength = contentLength
	req.RemoteAddr = st.c.remoteAddr
	req.TLS = st.c.tlsState
	return req, nil
}

// canonicalKey is the canonical form of a lower-case header name.
func canonicalKey(name string) string {
	if k, ok := commonCanonical[name]; ok {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// commonCanonical spares the allocation of the usual headers' canonical
// forms. It is never written.
var commonCanonical = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Content-Encoding", "Content-Length", "Content-Type", "Date", "Etag", "Host",
		"If-Match", "If-None-Match", "Location", "Retry-After", "User-Agent",
		"Warning", "X-Content-Type-Options", "Audit-Id", "Traceparent", "Tracestate",
		"Impersonate-User", "Impersonate-Group", "Impersonate-Uid", "Kubectl-Command",
		"Kubectl-Session", "X-Kubernetes-Pf-Flowschema-Uid", "X-Kubernetes-Pf-Prioritylevel-Uid",
		"Trailer", "Te", "Upgrade", "Origin", "Referer", "Vary", "Cookie", "Set-Cookie",
	} {
		m[strings.ToLower(k)] = k
	}
	return m
}()

// setTrailers fills the request's declared trailers.
func (st *stream) setTrailers(fields []hpack.HeaderField) {
	st.bmu.Lock()
	defer st.bmu.Unlock()
	for _, hf := range fields {
		k := canonicalKey(hf.Name)
		if _, declared := st.trailer[k]; declared {
			st.trailer[k] = append(st.trailer[k], hf.Value)
		}
	}
}

// run serves the request on the stream's goroutine and ends the stream,
// unless the handler detached the response (Detach): then the function
// Detach returned ends it.
func (st *stream) run(h http.Handler, req *http.Request) {
	panicked := true
	defer func() {
		if !panicked && st.resp.detached {
			return
		}
		if !st.ended.CompareAndSwap(false, true) {
			return
		}
		// The handler no longer counts against MaxConcurrentStreams
		// by the time the client can see the response's end.
		st.c.mu.Lock()
		st.c.handlers--
		st.c.mu.Unlock()
		if panicked {
			p := recover()
			if p != http.ErrAbortHandler {
				st.c.log.Error("h2conn: handler panic", "remote", st.c.remoteAddr, "path", req.URL.Path, "panic", p, "stack", string(debug.Stack()))
			}
			st.c.resetStream(st.id, http2.ErrCodeInternal)
		} else {
			st.resp.finish()
		}
		st.done()
	}()
	h.ServeHTTP(&st.resp, req)
	panicked = false
}

// endDetached ends a detached response (Detach's function): as run does
// when a handler returns, or with RST_STREAM INTERNAL_ERROR when abort.
func (st *stream) endDetached(abort bool) {
	if !st.ended.CompareAndSwap(false, true) {
		return // the handler panicked after it detached
	}
	st.c.mu.Lock()
	st.c.handlers--
	st.c.mu.Unlock()
	if abort {
		st.c.resetStream(st.id, http2.ErrCodeInternal)
	} else {
		st.resp.finish()
	}
	st.done()
}

// done ends the stream once its handler has returned: a client still
// sending its body is told to stop (RST_STREAM NO_ERROR, RFC 9113 §8.1);
// the context ends.
func (st *stream) done() {
	c := st.c
	c.mu.Lock()
	if !st.closed {
		if !st.remoteDone && !c.closing {
			_ = c.wfr.WriteRSTStream(st.id, http2.ErrCodeNo)
			c.work.Signal()
		}
		c.endStreamLocked(st, errHandlerDone)
	}
	c.mu.Unlock()
	st.abort(errHandlerDone)
}

// abort ends the stream's context and its body's reads with err.
func (st *stream) abort(err error) {
	st.ctx.stop(err)
	st.bodyFail(err)
}

// bodyWrite appends received body bytes; end marks the body's end.
func (st *stream) bodyWrite(p []byte, end bool) {
	st.bmu.Lock()
	if st.berr != nil {
		// Nobody will read it: the connection's window comes back.
		st.bmu.Unlock()
		st.consumed(len(p), false)
		return
	}
	if st.boff == len(st.body) {
		st.body, st.boff = st.body[:0], 0
	}
	st.body = append(st.body, p...)
	if end {
		st.berr = io.EOF
	}
	st.bcond.Broadcast()
	st.bmu.Unlock()
}

// bodyFail makes the body's reads fail with err once what was received
// is read (io.EOF stays: the body was whole).
func (st *stream) bodyFail(err error) {
	st.bmu.Lock()
	if st.berr == nil {
		st.berr = err
	}
	st.bcond.Broadcast()
	st.bmu.Unlock()
}

// requestBody is a stream's request body.
type requestBody stream

// Read reads the body; what it reads is given back to the client's
// windows.
func (b *requestBody) Read(p []byte) (int, error) {
	st := (*stream)(b)
	st.bmu.Lock()
	for st.boff == len(st.body) && st.berr == nil {
		st.bcond.Wait()
	}
	if st.boff == len(st.body) {
		err := st.berr
		st.bmu.Unlock()
		return 0, err
	}
	n := copy(p, st.body[st.boff:])
	st.boff += n
	st.bmu.Unlock()
	st.consumed(n, true)
	return n, nil
}

// Close stops reading: what is received from then on is discarded.
func (b *requestBody) Close() error {
	st := (*stream)(b)
	st.bmu.Lock()
	unread := len(st.body) - st.boff
	st.body, st.boff = nil, 0
	if st.berr == nil || st.berr == io.EOF {
		st.berr = errBodyClosed
	}
	st.bmu.Unlock()
	st.consumed(unread, false)
	return nil
}

// consumed gives back the window of n received bytes the handler read
// (read: the stream's window as well as the connection's) or that were
// discarded (the connection's only: the stream will not read more).
func (st *stream) consumed(n int, read bool) {
	if n == 0 {
		return
	}
	c := st.c
	c.mu.Lock()
	if !st.closed { // else endStreamLocked gave back all unread
		st.unread -= int32(n)
		if read {
			c.refundLocked(st, int32(n))
		} else {
			c.refundLocked(nil, int32(n))
		}
	}
	c.mu.Unlock()
}
