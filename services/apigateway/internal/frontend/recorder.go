package frontend

import (
	"bufio"
	"errors"
	"net"
	"net/http"
)

// recorder remembers the status code written, for metrics and for the
// panic handler (which must not write a second header). It forwards Flush,
// which watches need, and Hijack.
type recorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	written     int64 // body bytes
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = http.StatusOK, true
	}
	n, err := r.ResponseWriter.Write(b)
	r.written += int64(n)
	return n, err
}

// Flush sends buffered data to the client.
func (r *recorder) Flush() {
	if !r.wroteHeader {
		r.status, r.wroteHeader = http.StatusOK, true
	}
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack takes over the connection.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := r.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("frontend: hijack not supported")
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) code() int {
	if !r.wroteHeader {
		return http.StatusOK
	}
	return r.status
}
