package h2conn

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// gate counts the writes of the connections it wraps while counting,
// and holds them until open is closed.
type gate struct {
	counting atomic.Bool
	writes   atomic.Int32
	open     chan struct{}
}

type gatedListener struct {
	net.Listener
	g *gate
}

func (l gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return gatedConn{c, l.g}, nil
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c gatedConn) Write(p []byte) (int, error) {
	if c.g.counting.Load() {
		c.g.writes.Add(1)
		<-c.g.open
	}
	return c.Conn.Write(p)
}

// TestOneWritePerBurst: the frames many streams queue while the writer is
// busy go out together, in one write of the connection (one TLS record
// when they fit in one), not one per stream.
func TestOneWritePerBurst(t *testing.T) {
	const streams = 10
	g := &gate{open: make(chan struct{})}
	var ready, wrote sync.WaitGroup
	ready.Add(streams)
	wrote.Add(streams)
	fire := make(chan struct{})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		ready.Done()
		<-fire
		_, _ = w.Write([]byte("event"))
		w.(http.Flusher).Flush()
		wrote.Done()
		<-r.Context().Done()
	}))
	ts.Listener = gatedListener{ts.Listener, g}
	ts.EnableHTTP2 = true
	Configure(ts.Config, &Server{})
	ts.TLS = ts.Config.TLSConfig
	ts.StartTLS()
	t.Cleanup(ts.Close)

	c := dialRaw(t, ts)
	for i := range streams {
		c.headers(uint32(1+2*i), true)
	}
	ready.Wait()
	seen := 0
	c.until(func(f http2.Frame) bool {
		if _, ok := f.(*http2.MetaHeadersFrame); ok {
			seen++
		}
		return seen == streams
	})
	g.counting.Store(true)
	close(fire)
	// Every handler's Write and Flush return while the connection's
	// writes are held: their frames wait in the pending buffer.
	allWrote := make(chan struct{})
	go func() { wrote.Wait(); close(allWrote) }()
	select {
	case <-allWrote:
	case <-time.After(10 * time.Second):
		close(g.open)
		t.Fatal("handlers' Write and Flush wait for the connection's writes")
	}
	close(g.open)
	got := 0
	c.until(func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && string(d.Data()) == "event" {
			got++
		}
		return got == streams
	})
	g.counting.Store(false)
	// The writer was held in at most one write (the first event) when
	// the others were queued; they all went in the next.
	if n := g.writes.Load(); n > 2 {
		t.Errorf("%d writes of the connection for one event to %d streams, want at most 2", n, streams)
	}
}
