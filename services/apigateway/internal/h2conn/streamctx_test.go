package h2conn

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/ctxhook"
	"github.com/meridian-cp/meridian/services/apigateway/internal/reqdeadline"
	"golang.org/x/net/http2"
)

// TestStreamDeadline: a deadline set on a stream's context (reqdeadline)
// ends it as a context.WithDeadline's ends: Done closes, Err and Cause
// are DeadlineExceeded, Deadline reports it, what was registered on the
// context runs, and a derived context sees Canceled caused by it. The
// handler then ends its response cleanly (END_STREAM). A second deadline
// is refused.
func TestStreamDeadline(t *testing.T) {
	type seen struct {
		before, afterFunc                bool
		again                            bool
		err, cause, childErr, childCause error
		deadline                         time.Time
		hasDeadline                      bool
	}
	want := time.Now().Add(-time.Second) // passed: the timer fires at once
	got := make(chan seen, 1)
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), struct{}{}, 1) // as the front end's value contexts
		var s seen
		s.before = ctx.Err() != nil
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		if !reqdeadline.Set(ctx, want) {
			t.Error("reqdeadline.Set on an h2conn stream's context reported false")
		}
		<-ctx.Done()
		<-ran
		<-child.Done()
		s.afterFunc = true
		s.again = reqdeadline.Set(ctx, time.Now().Add(time.Hour))
		s.err, s.cause = ctx.Err(), context.Cause(ctx)
		s.childErr, s.childCause = child.Err(), context.Cause(child)
		s.deadline, s.hasDeadline = ctx.Deadline()
		got <- s
		_, _ = w.Write([]byte("ended"))
	}))
	c := dialRaw(t, ts)
	c.headers(1, true)
	var data string
	c.until(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.DataFrame:
			data += string(f.Data())
			return f.StreamEnded()
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset (%v), want a clean end", f.ErrCode)
		}
		return false
	})
	if data != "ended" {
		t.Errorf("body %q, want %q", data, "ended")
	}
	s := <-got
	if s.before {
		t.Error("the context had ended before its deadline was set")
	}
	if s.again {
		t.Error("a second deadline was accepted")
	}
	if s.err != context.DeadlineExceeded || s.cause != context.DeadlineExceeded {
		t.Errorf("Err %v, Cause %v; want DeadlineExceeded for both", s.err, s.cause)
	}
	if !errors.Is(s.childErr, context.Canceled) || s.childCause != context.DeadlineExceeded {
		t.Errorf("derived context: Err %v, Cause %v; want Canceled caused by DeadlineExceeded", s.childErr, s.childCause)
	}
	if !s.hasDeadline || !s.deadline.Equal(want) {
		t.Errorf("Deadline %v %v, want %v true", s.deadline, s.hasDeadline, want)
	}
}

// TestStreamDeadlineStreamEnds: the stream ends first: a stream reset by its client
// before its deadline ends its context with the reset's cause, not
// DeadlineExceeded, and stops the deadline's timer, which would
// otherwise keep the context until the deadline.
func TestStreamDeadlineStreamEnds(t *testing.T) {
	type result struct {
		err, cause error
		ctx        *streamCtx
	}
	got := make(chan result, 1)
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !reqdeadline.Set(r.Context(), time.Now().Add(time.Hour)) {
			t.Error("reqdeadline.Set reported false")
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		sc, _ := r.Context().(*streamCtx)
		got <- result{r.Context().Err(), context.Cause(r.Context()), sc}
	}))
	c := dialRaw(t, ts)
	c.headers(1, true)
	c.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != context.Canceled || !errors.Is(res.cause, errStreamClosed) {
		t.Errorf("Err %v, Cause %v; want Canceled by the stream's end", res.err, res.cause)
	}
	if res.ctx == nil {
		t.Fatal("the request's context is not the stream's")
	}
	res.ctx.mu.Lock()
	timer := res.ctx.timer
	res.ctx.mu.Unlock()
	if timer != nil {
		t.Error("the deadline's timer was not stopped at the stream's end")
	}
}

// TestStreamHook: a stream's context runs the hook ctxhook.AfterFunc
// takes (through the front end's value contexts), with no context
// registered under it, at each of its ends while its handler still runs
// (as a parked watch's stream outlives its handler): the client's reset,
// the deadline, and the connection's close.
func TestStreamHook(t *testing.T) {
	for _, tc := range []struct {
		name string
		// deadline is set on the stream's context when not zero.
		deadline time.Time
		// end ends the stream from the client's side, if it must.
		end func(c *rawConn)
	}{
		{"reset", time.Time{}, func(c *rawConn) {
			if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
		}},
		{"deadline", time.Now().Add(50 * time.Millisecond), nil},
		{"connection closed", time.Time{}, func(c *rawConn) { c.tc.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				took, ran bool
				err       error // the context's, as the hook saw it
			}
			got := make(chan result, 1)
			ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := context.WithValue(r.Context(), struct{}{}, 1)
				ran := make(chan error, 1)
				ctxhook.AfterFunc(ctx, func() { ran <- ctx.Err() })
				sc := r.Context().(*streamCtx)
				sc.mu.Lock()
				res := result{took: sc.hook != nil}
				sc.mu.Unlock()
				if !tc.deadline.IsZero() && !reqdeadline.Set(r.Context(), tc.deadline) {
					t.Error("reqdeadline.Set reported false")
				}
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				// The handler returns only once the hook ran (or
				// did not in time): its return ends the stream too.
				select {
				case res.err = <-ran:
					res.ran = true
				case <-time.After(10 * time.Second):
				}
				got <- res
			}))
			c := dialRaw(t, ts)
			c.headers(1, true)
			c.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
			if tc.end != nil {
				tc.end(c)
			}
			res := <-got
			if !res.took {
				t.Error("ctxhook.AfterFunc did not take the stream context's hook")
			}
			if !res.ran {
				t.Fatal("the hook did not run at the stream's end")
			}
			if res.err == nil {
				t.Error("the hook ran before the context ended")
			}
		})
	}
}
