package frontend

import (
	"net/http"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// gzipThreshold is the body size from which responses are compressed, as in
// kube-apiserver: below it compression costs more than it saves.
const gzipThreshold = 128 << 10

// gzipLevel is kube-apiserver's level, the fastest. The bodies compressed
// are large lists, and Go clients ask for gzip unless told not to: at the
// default level (6) compressing a large list takes longer than the store
// takes to read it, for a few percent fewer bytes (docs/benchmarks.md).
//
// The compressor is klauspost/compress's, a drop-in for compress/gzip
// (same format and API) whose level 1 is faster than the standard
// library's, for slightly larger output.
const gzipLevel = gzip.BestSpeed

// gzipWriters keeps compressors for reuse: each holds ~300 KiB of tables
// and window, which a response would otherwise allocate and leave to the
// collector. It keeps the buffers of responses below gzipThreshold too
// (bufs, of *[]byte): most responses of gets are such, each buffered
// whole, then written.
type gzipWriters struct{ pool, bufs sync.Pool }

// maxPooledBuf is the largest buffer kept for reuse: a buffer grown
// towards gzipThreshold by a large response is left to the collector
// rather than held for responses that mostly need a few KiB.
const maxPooledBuf = 16 << 10

// buf returns an empty buffer.
func (p *gzipWriters) buf() []byte {
	if b, ok := p.bufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

// putBuf keeps b for reuse; the caller no longer uses it.
func (p *gzipWriters) putBuf(b []byte) {
	if cap(b) > 0 && cap(b) <= maxPooledBuf {
		p.bufs.Put(&b)
	}
}

// get returns a compressor writing to w.
func (p *gzipWriters) get(w http.ResponseWriter) *gzip.Writer {
	if z, ok := p.pool.Get().(*gzip.Writer); ok {
		z.Reset(w)
		return z
	}
	z, _ := gzip.NewWriterLevel(w, gzipLevel) // the level is valid
	return z
}

// put returns a closed compressor.
func (p *gzipWriters) put(z *gzip.Writer) { p.pool.Put(z) }

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
	writers *gzipWriters
	code    int
	buf     []byte
	gz      *gzip.Writer
	// gzipped: what is written is a gzip stream already (a list
	// compressed by watchfanout), sent as it is.
	gzipped bool
}

// StartGzipped makes the response gzip-encoded with what is written to it
// from now on sent as it is: a gzip stream made elsewhere
// (resources.GzipSink). False once anything has been written.
func (g *gzipWriter) StartGzipped() bool {
	if g.gz != nil || len(g.buf) > 0 || g.gzipped {
		return false
	}
	g.gzipped = true
	return true
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
	if g.gzipped {
		if g.code != -1 {
			g.writeGzipHeader()
			g.code = -1 // sent
		}
		return g.ResponseWriter.Write(p)
	}
	if len(g.buf) == 0 && len(p) >= gzipThreshold {
		// A first write past the threshold (a relayed list chunk) is
		// compressed from where it is, not copied into buf first.
		if err := g.startGzip(); err != nil {
			return 0, err
		}
		return g.gz.Write(p)
	}
	if g.buf == nil {
		g.buf = g.writers.buf()
	}
	g.buf = append(g.buf, p...)
	if len(g.buf) < gzipThreshold {
		return len(p), nil
	}
	if err := g.startGzip(); err != nil {
		return 0, err
	}
	g.writers.putBuf(g.buf)
	g.buf = nil
	return len(p), nil
}

// writeGzipHeader sends the header of a compressed response.
func (g *gzipWriter) writeGzipHeader() {
	h := g.ResponseWriter.Header()
	h.Set("Content-Encoding", "gzip")
	h.Add("Vary", "Accept-Encoding")
	h.Del("Content-Length")
	g.ResponseWriter.WriteHeader(g.code)
}

// startGzip sends the header of a compressed response and compresses
// what buf holds.
func (g *gzipWriter) startGzip() error {
	g.writeGzipHeader()
	g.gz = g.writers.get(g.ResponseWriter)
	if len(g.buf) == 0 {
		return nil
	}
	_, err := g.gz.Write(g.buf)
	return err
}

// Flush sends what the compressor has written so far (a streamed list
// flushes after every chunk); below the threshold it keeps buffering.
// The compressor writes out each block it fills (64 KiB of input), so
// at most one block waits in it until the next chunk or Close; forcing
// it out on every chunk (a sync flush) would cost a block end and a
// marker per chunk, ~4% of a whole list's CPU (docs/benchmarks.md).
func (g *gzipWriter) Flush() {
	if g.gz == nil && (!g.gzipped || g.code != -1) {
		return
	}
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (g *gzipWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// Close sends what is buffered.
func (g *gzipWriter) Close() error {
	if g.gz != nil {
		err := g.gz.Close()
		g.writers.put(g.gz)
		g.gz = nil
		return err
	}
	if g.gzipped {
		if g.code != -1 {
			// Nothing was written: the stream was cut before it began.
			g.writeGzipHeader()
		}
		return nil
	}
	if g.code == 0 {
		g.code = http.StatusOK
	}
	g.ResponseWriter.WriteHeader(g.code)
	// The response writer keeps nothing of what it is given once Write
	// returns, so the buffer is free again then.
	_, err := g.ResponseWriter.Write(g.buf)
	g.writers.putBuf(g.buf)
	g.buf = nil
	return err
}
