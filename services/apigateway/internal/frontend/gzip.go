package frontend

import (
	"compress/gzip"
	"net/http"
	"strings"
)

// gzipThreshold is the body size from which responses are compressed, as in
// kube-apiserver: below it compression costs more than it saves.
const gzipThreshold = 128 << 10

// acceptsGzip reports whether the client takes gzip-encoded responses.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && !strings.Contains(strings.ReplaceAll(params, " ", ""), "q=0") {
			return true
		}
	}
	return false
}

// gzipWriter buffers a response until it reaches gzipThreshold, then
// switches to gzip; a smaller response goes out as it is. Close must be
// called once the handler is done.
type gzipWriter struct {
	http.ResponseWriter
	code int
	buf  []byte
	gz   *gzip.Writer
}

func (g *gzipWriter) WriteHeader(code int) {
	if g.code == 0 {
		g.code = code
	}
}

func (g *gzipWriter) Write(p []byte) (int, error) {
	if g.code == 0 {
		g.code = http.StatusOK
	}
	if g.gz != nil {
		return g.gz.Write(p)
	}
	g.buf = append(g.buf, p...)
	if len(g.buf) < gzipThreshold {
		return len(p), nil
	}
	h := g.ResponseWriter.Header()
	h.Set("Content-Encoding", "gzip")
	h.Add("Vary", "Accept-Encoding")
	h.Del("Content-Length")
	g.ResponseWriter.WriteHeader(g.code)
	g.gz = gzip.NewWriter(g.ResponseWriter)
	if _, err := g.gz.Write(g.buf); err != nil {
		return 0, err
	}
	g.buf = nil
	return len(p), nil
}

// Flush sends what is compressed so far (a streamed list flushes after
// every chunk); below the threshold it keeps buffering.
func (g *gzipWriter) Flush() {
	if g.gz == nil {
		return
	}
	_ = g.gz.Flush()
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (g *gzipWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// Close sends what is buffered.
func (g *gzipWriter) Close() error {
	if g.gz != nil {
		return g.gz.Close()
	}
	if g.code == 0 {
		g.code = http.StatusOK
	}
	g.ResponseWriter.WriteHeader(g.code)
	_, err := g.ResponseWriter.Write(g.buf)
	return err
}
