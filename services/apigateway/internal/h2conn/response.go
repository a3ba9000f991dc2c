package h2conn

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is a stream's http.ResponseWriter, with net/http's semantics:
// an implicit 200; the headers as they were at WriteHeader; the first
// bytes held back until they exceed firstSize, a Flush or the handler's
// end, so that a body written whole gets a Content-Length and, without a
// Content-Type, a sniffed one; after the headers, every Write queued on
// the connection at once. It is used by the handler's goroutine only.
type response struct {
	st *stream
	// header is what the handler sets; sent the snapshot taken at
	// WriteHeader.
	header http.Header
	sent   http.Header
	status int
	// headersOut is set once the HEADERS frame is queued.
	headersOut bool
	// first holds the body's first bytes until the headers go out.
	first []byte
	// written counts body bytes; clen is the declared Content-Length
	// (-1: none); trailers the declared trailer names.
	written  int64
	clen     int64
	trailers []string
	isHead   bool
	// finished is set when the handler has returned; ended once
	// END_STREAM is queued.
	finished bool
	ended    bool
	// detached is set by Detach: the response outlives the handler.
	detached bool
}

// firstSize is how much of a body is held back before the headers are
// sent, as net/http's 4 KiB write buffer does.
const firstSize = 4 << 10

func (r *response) init(st *stream, req *http.Request) {
	r.st = st
	r.clen = -1
	r.isHead = req.Method == http.MethodHead
}

// Header is the response's header map.
func (r *response) Header() http.Header {
	if r.header == nil {
		r.header = make(http.Header)
	}
	return r.header
}

// WriteHeader sets the status; 1xx informational responses are not sent.
func (r *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("h2conn: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if r.status != 0 || code < 200 {
		return
	}
	r.status = code
	r.sent = r.header.Clone()
	if r.sent == nil {
		r.sent = http.Header{}
	}
	if cl := r.sent.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 63); err == nil && n >= 0 {
			r.clen = n
		} else {
			delete(r.sent, "Content-Length")
		}
	}
	for _, v := range r.sent["Trailer"] {
		for key := range strings.SplitSeq(v, ",") {
			if key = strings.TrimSpace(key); key != "" {
				r.trailers = append(r.trailers, http.CanonicalHeaderKey(key))
			}
		}
	}
	delete(r.sent, "Trailer")
}

// Write writes body bytes.
func (r *response) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(r.status) {
		return 0, http.ErrBodyNotAllowed
	}
	r.written += int64(len(p))
	if r.clen >= 0 && r.written > r.clen {
		r.written -= int64(len(p))
		return 0, http.ErrContentLength
	}
	if r.isHead {
		return len(p), nil
	}
	if !r.headersOut {
		if len(r.first)+len(p) <= firstSize {
			if r.first == nil {
				r.first = r.st.c.srv.getFirst()
			}
			r.first = append(r.first, p...)
			return len(p), nil
		}
		if err := r.sendHeaders(false); err != nil {
			return 0, err
		}
	}
	if err := r.st.c.writeData(r.st, p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteString writes s (io.StringWriter).
func (r *response) WriteString(s string) (int, error) {
	return r.Write([]byte(s))
}

// Flush sends the headers and what is held back.
func (r *response) Flush() { _ = r.FlushError() }

// FlushError is Flush, reporting an error when the stream or the
// connection has ended (http.ResponseController's Flush).
func (r *response) FlushError() error {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.headersOut {
		return r.sendHeaders(false)
	}
	return r.st.c.streamErr(r.st)
}

// Detach lets the response outlive its handler: when the handler returns,
// the stream stays open (its context goes on, it counts against
// MaxConcurrentStreams) and the response may still be written, by one
// goroutine at a time, until the returned function ends it as the
// handler's return would have (abort: with RST_STREAM INTERNAL_ERROR
// instead). That function must be called once, after the handler has
// returned; the gateway parks idle watches with it (package watchpark).
// Detach is called by the handler's goroutine.
func (r *response) Detach() (end func(abort bool)) {
	r.detached = true
	return r.st.endDetached
}

// finish ends the response when the handler returns.
func (r *response) finish() {
	r.finished = true
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	trailers := r.trailerFields()
	if !r.headersOut {
		_ = r.sendHeaders(len(trailers) == 0)
	}
	switch {
	case r.ended:
	case len(trailers) > 0:
		_ = r.st.c.writeHeaders(r.st, trailers, true)
	default:
		_ = r.st.c.writeData(r.st, nil, true)
	}
}

// sendHeaders queues the HEADERS frame and what is held back; end: the
// handler has returned and its trailers are none.
func (r *response) sendHeaders(end bool) error {
	r.headersOut = true
	h := r.sent
	// Once the headers are out, the snapshot is not needed, nor the
	// handler's header map unless it holds trailers: a long response (a
	// watch) keeps neither. A map the handler asks for later is new and
	// empty, as changes to the old one would have been ignored but for
	// trailers.
	r.sent = nil
	if len(r.trailers) == 0 && !hasTrailerPrefix(r.header) {
		r.header = nil
	}
	first := r.first
	r.first = nil
	if r.clen < 0 && r.finished && bodyAllowed(r.status) && (len(first) > 0 || !r.isHead) {
		if _, set := h["Content-Length"]; !set {
			h["Content-Length"] = []string{strconv.Itoa(len(first))}
		}
	}
	if _, set := h["Content-Type"]; !set && h.Get("Content-Encoding") == "" && bodyAllowed(r.status) && len(first) > 0 {
		h["Content-Type"] = []string{http.DetectContentType(first)}
	}
	if _, set := h["Date"]; !set {
		h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	}
	fields := make([]field, 0, len(h)+1)
	fields = append(fields, field{":status", statusText(r.status)})
	fields = appendFields(fields, h)
	endHeaders := end && len(first) == 0 || r.isHead
	err := r.st.c.writeHeaders(r.st, fields, endHeaders)
	r.ended = endHeaders
	if err == nil && len(first) > 0 && !r.isHead {
		err = r.st.c.writeData(r.st, first, end)
		r.ended = end
	}
	r.st.c.srv.putFirst(first)
	return err
}

// trailerFields are the trailers the handler set: those it declared in
// the Trailer header and those named with http.TrailerPrefix.
func (r *response) trailerFields() []field {
	var fields []field
	for _, k := range r.trailers {
		for _, v := range r.header[k] {
			fields = appendField(fields, k, v)
		}
	}
	for k, vs := range r.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			for _, v := range vs {
				fields = appendField(fields, name, v)
			}
		}
	}
	return fields
}

// hasTrailerPrefix reports whether h names a trailer with
// http.TrailerPrefix.
func hasTrailerPrefix(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// field is a header field to encode, its name lower-case.
type field struct{ name, value string }

// appendFields appends h's fields that may be sent in HTTP/2: valid names
// and values, no connection-specific ones (RFC 9113 §8.2.2), no
// http.TrailerPrefix ones.
func appendFields(fields []field, h http.Header) []field {
	for k, vs := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		for _, v := range vs {
			fields = appendField(fields, k, v)
		}
	}
	return fields
}

func appendField(fields []field, k, v string) []field {
	name := lowerKey(k)
	if connectionSpecific(name) {
		return fields
	}
	if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(v) {
		return fields
	}
	return append(fields, field{name, v})
}

// connectionSpecific reports whether the lower-case header name is one
// HTTP/2 forbids (RFC 9113 §8.2.2), in requests and responses alike.
func connectionSpecific(name string) bool {
	switch name {
	case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// lowerKey is the lower-case form of a header name.
func lowerKey(k string) string {
	for i := 0; i < len(k); i++ {
		if c := k[i]; 'A' <= c && c <= 'Z' {
			if l, ok := commonLower[k]; ok {
				return l
			}
			return strings.ToLower(k)
		}
	}
	return k
}

// commonLower is commonCanonical the other way. It is never written.
var commonLower = func() map[string]string {
	m := make(map[string]string, len(commonCanonical))
	for l, k := range commonCanonical {
		m[k] = l
	}
	return m
}()

// statusText is a status code as :status says it.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 201:
		return "201"
	case 404:
		return "404"
	}
	return strconv.Itoa(code)
}

// bodyAllowed reports whether a response of status may have a body.
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == 204 || status == 304)
}
