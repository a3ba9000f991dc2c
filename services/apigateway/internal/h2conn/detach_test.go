package h2conn

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// detacher is what a handler asserts of its ResponseWriter to detach it.
type detacher interface {
	Detach() (end func(abort bool))
}

// TestDetach: a detached response outlives its handler. What is written
// after the handler returned reaches the client, the stream counts
// against MaxConcurrentStreams until it is ended, and its end is
// END_STREAM, or RST_STREAM INTERNAL_ERROR when aborted; its context
// ends then.
func TestDetach(t *testing.T) {
	type detached struct {
		w   http.ResponseWriter
		r   *http.Request
		end func(bool)
	}
	got := make(chan detached, 2)
	ts := newServer(t, &Server{MaxConcurrentStreams: 2}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		got <- detached{w, r, w.(detacher).Detach()}
	}))
	c := dialRaw(t, ts)
	c.headers(1, true, "x-stream", "1")
	c.headers(3, true, "x-stream", "3")
	a, b := <-got, <-got
	if a.r.Header.Get("X-Stream") == "3" {
		a, b = b, a // a is stream 1's, b stream 3's
	}
	// Both handlers have returned; both streams still count.
	c.headers(5, true)
	f := c.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	if f.StreamID != 5 || f.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("got RST_STREAM %d %v, want 5 REFUSED_STREAM", f.StreamID, f.ErrCode)
	}
	if a.r.Context().Err() != nil {
		t.Fatal("a detached stream's context ended when its handler returned")
	}
	// Written after the handler returned, from another goroutine.
	go func() {
		_, _ = a.w.Write([]byte("after"))
		a.end(false)
		b.end(true)
	}()
	var data string
	var endedA, resetB bool
	c.until(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.DataFrame:
			if f.StreamID == 1 {
				data += string(f.Data())
				endedA = endedA || f.StreamEnded()
			}
		case *http2.RSTStreamFrame:
			resetB = resetB || f.StreamID == 3 && f.ErrCode == http2.ErrCodeInternal
		}
		return endedA && resetB
	})
	if data != "after" {
		t.Errorf("stream 1 got %q, want %q", data, "after")
	}
	<-a.r.Context().Done()
	<-b.r.Context().Done()
	// Their seats are free again.
	c.headers(7, true)
	h := c.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
	if h.StreamID != 7 || h.PseudoValue("status") != "200" {
		t.Errorf("stream 7: %d %s", h.StreamID, h.PseudoValue("status"))
	}
	(<-got).end(false)
}

// TestDetachDropsRequest: once its handler has returned, a detached
// stream keeps no reference to its *http.Request (nor its URL and header
// map): a parked watch costs its stream, not its request. The response
// still writes and ends.
func TestDetachDropsRequest(t *testing.T) {
	type detached struct {
		w   http.ResponseWriter
		ctx context.Context
		end func(bool)
	}
	got := make(chan detached, 1)
	collected := make(chan struct{})
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		runtime.AddCleanup(r, func(c chan struct{}) { close(c) }, collected)
		got <- detached{w, r.Context(), w.(detacher).Detach()}
	}))
	c := dialRaw(t, ts)
	c.headers(1, true)
	d := <-got
	deadline := time.Now().Add(10 * time.Second)
	for done := false; !done; {
		runtime.GC()
		select {
		case <-collected:
			done = true
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the request of a detached stream is still referenced after its handler returned")
			}
		}
	}
	if d.ctx.Err() != nil {
		t.Fatal("the detached stream's context ended")
	}
	go func() {
		_, _ = d.w.Write([]byte("after"))
		d.end(false)
	}()
	var data string
	c.until(func(f http2.Frame) bool {
		df, ok := f.(*http2.DataFrame)
		if ok && df.StreamID == 1 {
			data += string(df.Data())
			return df.StreamEnded()
		}
		return false
	})
	if data != "after" {
		t.Errorf("got %q, want %q", data, "after")
	}
}
