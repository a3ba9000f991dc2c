package watchfanoutclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A scripted replica answers each watch with what its script says, and
// records the requests it got.

// script serves one watch request on a replica: it sends with send and
// returns how the watch ends (nil: a normal end, as when the replica
// drains; an UNAVAILABLE status: the replica went away).
type script func(ctx context.Context, req *watchv1.WatchRequest, send func(frames []byte, rv int) error) error

type scriptedReplica struct {
	watchv1.UnimplementedWatchServiceServer
	name string

	mu     sync.Mutex
	script script
	reqs   []*watchv1.WatchRequest
	users  []string // the caller each watch came from (lib/identity)
}

// Watch sends the empty first message (as watchfanout does once it has
// validated the request), then runs the script.
func (r *scriptedReplica) Watch(req *watchv1.WatchRequest, s grpc.ServerStreamingServer[watchv1.WatchResponse]) error {
	r.mu.Lock()
	r.reqs = append(r.reqs, proto.Clone(req).(*watchv1.WatchRequest))
	md, _ := metadata.FromIncomingContext(s.Context())
	u, _ := identity.FromIncomingMetadata(md)
	r.users = append(r.users, u.Name)
	sc := r.script
	r.mu.Unlock()
	if err := s.Send(&watchv1.WatchResponse{}); err != nil {
		return err
	}
	return sc(s.Context(), req, func(frames []byte, rv int) error {
		resp := &watchv1.WatchResponse{Frames: frames}
		if rv > 0 {
			resp.ResourceVersion = fmt.Sprint(rv)
		}
		return s.Send(resp)
	})
}

func (r *scriptedReplica) set(sc script) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.script = sc
}

// requests returns the requests the replica got.
func (r *scriptedReplica) requests() []*watchv1.WatchRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// pool serves the replicas and returns a pool over them.
func pool(t *testing.T, rs ...*scriptedReplica) *Pool {
	t.Helper()
	var conns []*grpc.ClientConn
	for _, r := range rs {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		watchv1.RegisterWatchServiceServer(srv, r)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return New(conns)
}

// JSON frames, as watchfanout encodes them.

func added(name string, rv int) []byte {
	return fmt.Appendf(nil, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"resourceVersion":"%d"}}}`+"\n", name, rv)
}

func bookmark(rv int, initialEnd bool) []byte {
	ann := ""
	if initialEnd {
		ann = `,"annotations":{"k8s.io/initial-events-end":"true"}`
	}
	return fmt.Appendf(nil, `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"%d"%s}}}`+"\n", rv, ann)
}

func errorFrame(code int, reason string) []byte {
	return fmt.Appendf(nil, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"x","reason":%q,"code":%d}}`+"\n", reason, code)
}

var errGone = status.Error(codes.Unavailable, "replica went away")

// events sends an ADDED event for each revision, one message each.
func events(send func([]byte, int) error, revs ...int) error {
	for _, rev := range revs {
		if err := send(added(fmt.Sprintf("cm-%d", rev), rev), rev); err != nil {
			return err
		}
	}
	return nil
}

// hold keeps the watch open until the client ends it.
func hold(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// recvAll reads n batches and returns their frames, in order.
func recvAll(t *testing.T, w *Watch, n int) string {
	t.Helper()
	var out strings.Builder
	for i := range n {
		msg, err := w.Recv()
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		out.Write(msg.GetFrames())
	}
	return out.String()
}

func frames(fs ...[]byte) string {
	var b strings.Builder
	for _, f := range fs {
		b.Write(f)
	}
	return b.String()
}

// TestWatchResumesOnAnotherReplica: the replica serving a watch from
// resourceVersion 10 sends two events and then goes away (its stream
// breaks) or drains (its watch ends before the deadline). The watch goes on
// on the other replica, asked for the changes after 12 with the watch's
// other parameters and the time left of its deadline; the caller gets
// every event once, in order, with no error.
func TestWatchResumesOnAnotherReplica(t *testing.T) {
	for _, end := range []struct {
		name string
		err  error
	}{{"goes away", errGone}, {"drains", nil}} {
		t.Run(end.name, func(t *testing.T) {
			a, b := &scriptedReplica{name: "a"}, &scriptedReplica{name: "b"}
			first := true
			var mu sync.Mutex
			sc := func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
				mu.Lock()
				serving := first
				first = false
				mu.Unlock()
				if serving {
					if err := events(send, 11, 12); err != nil {
						return err
					}
					return end.err
				}
				if err := events(send, 13); err != nil {
					return err
				}
				return hold(ctx)
			}
			a.set(sc)
			b.set(sc)
			p := pool(t, a, b)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			resumes := 0
			req := &watchv1.WatchRequest{
				Resource: &watchv1.Resource{Version: "v1", Resource: "configmaps"}, Namespace: "ns",
				LabelSelector: "app=x", ResourceVersion: "10", AllowBookmarks: true, Encoding: watchv1.Encoding_ENCODING_JSON,
			}
			w := p.Watch(ctx, req, func() { resumes++ })
			defer w.Close()
			if got, want := recvAll(t, w, 3), frames(added("cm-11", 11), added("cm-12", 12), added("cm-13", 13)); got != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
			if resumes != 1 {
				t.Fatalf("%d resumes, want 1", resumes)
			}
			reqs := append(a.requests(), b.requests()...)
			if len(reqs) != 2 {
				t.Fatalf("%d watch requests, want 2", len(reqs))
			}
			if len(a.requests()) != 1 {
				t.Fatalf("replica a got %d requests: the resumed watch went back to the replica that lost it", len(a.requests()))
			}
			opened, second := reqs[0], reqs[1]
			if b.requests()[0].GetResourceVersion() == "10" {
				opened, second = reqs[1], reqs[0]
			}
			if opened.GetResourceVersion() != "10" || second.GetResourceVersion() != "12" {
				t.Fatalf("requests from %q then %q, want 10 then 12", opened.GetResourceVersion(), second.GetResourceVersion())
			}
			if second.SendInitialEvents != nil || second.GetResourceVersionMatch() != "" || !second.GetAllowBookmarks() ||
				second.GetLabelSelector() != "app=x" || second.GetNamespace() != "ns" {
				t.Fatalf("resumed with %v", second)
			}
			if ts := second.GetTimeoutSeconds(); ts < 1 || ts > 30 {
				t.Fatalf("resumed with timeout_seconds %d, want the time left of 30s", ts)
			}
		})
	}
}

// TestWatchGoneMovesOnThenNoReplica: a replica whose history does not
// reach the watch's resourceVersion answers 410 Expired (as an ERROR
// frame); the watch moves to the next replica without delivering it. When
// every replica answers so, Recv returns ErrNoReplica and ResumeFrom is
// the last resourceVersion delivered, for the store to go on from.
func TestWatchGoneMovesOnThenNoReplica(t *testing.T) {
	a, b := &scriptedReplica{name: "a"}, &scriptedReplica{name: "b"}
	var mu sync.Mutex
	served := 0
	sc := func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
		mu.Lock()
		served++
		n := served
		mu.Unlock()
		switch {
		case n == 1:
			// The first replica serves two events, then re-lists from the
			// store (410 after them).
			if err := events(send, 11, 12); err != nil {
				return err
			}
			return send(errorFrame(410, "Expired"), 12)
		case req.GetResourceVersion() == "12":
			return send(errorFrame(410, "Expired"), 0)
		}
		return fmt.Errorf("unexpected request %v", req)
	}
	a.set(sc)
	b.set(sc)
	p := pool(t, a, b)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	w := p.Watch(ctx, &watchv1.WatchRequest{ResourceVersion: "10"}, nil)
	defer w.Close()
	if got, want := recvAll(t, w, 2), frames(added("cm-11", 11), added("cm-12", 12)); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	msg, err := w.Recv()
	if !errors.Is(err, ErrNoReplica) {
		t.Fatalf("Recv: %q, %v; want ErrNoReplica", msg.GetFrames(), err)
	}
	if rv, ok := w.ResumeFrom(); !ok || rv != "12" {
		t.Fatalf("ResumeFrom %q %v, want 12", rv, ok)
	}
	if !w.Served() {
		t.Fatal("Served is false")
	}
	// The replica that re-listed is not asked again: the other one was
	// asked once for the changes after 12.
	for _, r := range []*scriptedReplica{a, b} {
		from10, from12 := 0, 0
		for _, req := range r.requests() {
			switch req.GetResourceVersion() {
			case "10":
				from10++
			case "12":
				from12++
			}
		}
		if from10+from12 != 1 {
			t.Fatalf("replica %s was asked %d times from 10 and %d times from 12, want once in all", r.name, from10, from12)
		}
	}
}

// TestWatchNewGoneIsGone: a new watch from a resourceVersion older than
// every replica's history gets the 410 ERROR frame (after each replica was
// asked), as from kube-apiserver's watch cache, and ends; the store does
// not serve it.
func TestWatchNewGoneIsGone(t *testing.T) {
	a, b := &scriptedReplica{name: "a"}, &scriptedReplica{name: "b"}
	sc := func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
		return send(errorFrame(410, "Expired"), 0)
	}
	a.set(sc)
	b.set(sc)
	p := pool(t, a, b)
	w := p.Watch(t.Context(), &watchv1.WatchRequest{ResourceVersion: "10"}, nil)
	defer w.Close()
	if got, want := recvAll(t, w, 1), frames(errorFrame(410, "Expired")); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := w.Recv(); err != io.EOF {
		t.Fatalf("after the ERROR: %v, want io.EOF", err)
	}
	if na, nb := len(a.requests()), len(b.requests()); na != 1 || nb != 1 {
		t.Fatalf("replicas asked %d and %d times, want once each", na, nb)
	}
}

// TestWatchOtherErrorEnds: an ERROR frame that is not about the replica
// (429, the watcher fell behind) is delivered, and the watch ends there.
func TestWatchOtherErrorEnds(t *testing.T) {
	a := &scriptedReplica{name: "a"}
	a.set(func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
		if err := events(send, 11); err != nil {
			return err
		}
		return send(errorFrame(429, "TooManyRequests"), 11)
	})
	p := pool(t, a)
	w := p.Watch(t.Context(), &watchv1.WatchRequest{ResourceVersion: "10"}, nil)
	defer w.Close()
	if got, want := recvAll(t, w, 2), frames(added("cm-11", 11), errorFrame(429, "TooManyRequests")); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := w.Recv(); err != io.EOF {
		t.Fatalf("after the ERROR: %v, want io.EOF", err)
	}
	if n := len(a.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// TestWatchInitialEvents: a watch with sendInitialEvents=true whose
// replica goes away before it delivered any initial event starts over on
// another as asked; one whose replica goes away after it delivered some,
// before the end bookmark, ends with ErrInitialEventsCut; once the end
// bookmark was delivered it goes on from the bookmark's resourceVersion.
func TestWatchInitialEvents(t *testing.T) {
	yes := true
	req := &watchv1.WatchRequest{ResourceVersion: "", ResourceVersionMatch: "NotOlderThan", SendInitialEvents: &yes, AllowBookmarks: true}
	t.Run("none delivered", func(t *testing.T) {
		a, b := &scriptedReplica{name: "a"}, &scriptedReplica{name: "b"}
		var mu sync.Mutex
		n := 0
		sc := func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
			mu.Lock()
			n++
			first := n == 1
			mu.Unlock()
			if first {
				return errGone // gone before its snapshot
			}
			if err := send([]byte(frames(added("a", 3), bookmark(20, true))), 20); err != nil {
				return err
			}
			return hold(ctx)
		}
		a.set(sc)
		b.set(sc)
		p := pool(t, a, b)
		w := p.Watch(t.Context(), req, nil)
		defer w.Close()
		if got, want := recvAll(t, w, 1), frames(added("a", 3), bookmark(20, true)); got != want {
			t.Fatalf("got\n%s\nwant\n%s", got, want)
		}
		for _, r := range append(a.requests(), b.requests()...) {
			if r.GetResourceVersion() != "" || !r.GetSendInitialEvents() || r.GetResourceVersionMatch() != "NotOlderThan" {
				t.Fatalf("asked %v, want the watch as asked", r)
			}
		}
	})
	t.Run("some delivered", func(t *testing.T) {
		a, b := &scriptedReplica{name: "a"}, &scriptedReplica{name: "b"}
		var mu sync.Mutex
		n := 0
		sc := func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
			mu.Lock()
			n++
			first := n == 1
			mu.Unlock()
			if !first {
				t.Errorf("asked again: %v", req)
				return nil
			}
			if err := send(added("a", 3), 3); err != nil {
				return err
			}
			return errGone
		}
		a.set(sc)
		b.set(sc)
		p := pool(t, a, b)
		w := p.Watch(t.Context(), req, nil)
		defer w.Close()
		recvAll(t, w, 1)
		if _, err := w.Recv(); !errors.Is(err, ErrInitialEventsCut) {
			t.Fatalf("Recv: %v, want ErrInitialEventsCut", err)
		}
	})
	t.Run("all delivered", func(t *testing.T) {
		a, b := &scriptedReplica{name: "a"}, &scriptedReplica{name: "b"}
		sc := func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
			if req.GetResourceVersion() == "20" {
				if err := events(send, 21); err != nil {
					return err
				}
				return hold(ctx)
			}
			if err := send([]byte(frames(added("a", 3), bookmark(20, true))), 20); err != nil {
				return err
			}
			return errGone
		}
		a.set(sc)
		b.set(sc)
		p := pool(t, a, b)
		w := p.Watch(t.Context(), req, nil)
		defer w.Close()
		if got, want := recvAll(t, w, 2), frames(added("a", 3), bookmark(20, true), added("cm-21", 21)); got != want {
			t.Fatalf("got\n%s\nwant\n%s", got, want)
		}
	})
}

// TestWatchLegacyInitialEvents: a watch asking for initial events the
// legacy way (resourceVersion unset, sendInitialEvents unset) is asked of
// the replica with sendInitialEvents=true, to learn where its initial
// events end; the end bookmark is not delivered. Without bookmarks asked
// for, the watch then goes on from the bookmark's resourceVersion with the
// client's own parameters; with them, on the same stream.
func TestWatchLegacyInitialEvents(t *testing.T) {
	for _, bookmarks := range []bool{false, true} {
		t.Run(fmt.Sprint("bookmarks=", bookmarks), func(t *testing.T) {
			a := &scriptedReplica{name: "a"}
			a.set(func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
				if req.GetResourceVersion() == "20" {
					if err := events(send, 22); err != nil {
						return err
					}
					return hold(ctx)
				}
				if err := send([]byte(frames(added("a", 3), added("b", 7))), 7); err != nil {
					return err
				}
				if err := send(bookmark(20, true), 20); err != nil {
					return err
				}
				if bookmarks {
					if err := events(send, 21); err != nil {
						return err
					}
				}
				return hold(ctx)
			})
			p := pool(t, a)
			resumes := 0
			w := p.Watch(t.Context(), &watchv1.WatchRequest{AllowBookmarks: bookmarks}, func() { resumes++ })
			defer w.Close()
			want := frames(added("a", 3), added("b", 7), added("cm-22", 22))
			if bookmarks {
				want = frames(added("a", 3), added("b", 7), added("cm-21", 21))
			}
			if got := recvAll(t, w, 2); got != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
			reqs := a.requests()
			if r := reqs[0]; !r.GetSendInitialEvents() || r.GetResourceVersionMatch() != "NotOlderThan" || !r.GetAllowBookmarks() || r.GetResourceVersion() != "" {
				t.Fatalf("first asked %v", r)
			}
			switch {
			case bookmarks && len(reqs) != 1:
				t.Fatalf("%d requests, want 1", len(reqs))
			case !bookmarks && (len(reqs) != 2 || reqs[1].SendInitialEvents != nil || reqs[1].GetAllowBookmarks() || reqs[1].GetResourceVersion() != "20"):
				t.Fatalf("requests %v, want a second one from 20 without bookmarks", reqs)
			}
			if resumes != 0 {
				t.Fatalf("%d resumes, want none", resumes)
			}
		})
	}
}

// TestWatchEndsAtDeadline: a replica is asked for the time left of the
// watch's deadline, rounded up, and at the deadline Recv returns io.EOF.
func TestWatchEndsAtDeadline(t *testing.T) {
	a := &scriptedReplica{name: "a"}
	a.set(func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
		return hold(ctx)
	})
	p := pool(t, a)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	w := p.Watch(ctx, &watchv1.WatchRequest{ResourceVersion: "10", TimeoutSeconds: 600}, nil)
	defer w.Close()
	if _, err := w.Recv(); err != io.EOF {
		t.Fatalf("Recv: %v, want io.EOF", err)
	}
	reqs := a.requests()
	if len(reqs) != 1 || reqs[0].GetTimeoutSeconds() != 2 {
		t.Fatalf("requests %v, want one with timeout_seconds 2", reqs)
	}
}

// TestWatchNoReplicaAtAll: when no replica takes the watch, Recv returns
// ErrNoReplica at once, and the store serves the watch as asked.
func TestWatchNoReplicaAtAll(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close() // nothing listens there now
	c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := New([]*grpc.ClientConn{c})
	w := p.Watch(t.Context(), &watchv1.WatchRequest{}, nil)
	defer w.Close()
	if _, err := w.Recv(); !errors.Is(err, ErrNoReplica) {
		t.Fatalf("Recv: %v, want ErrNoReplica", err)
	}
	if _, ok := w.ResumeFrom(); ok || w.Served() {
		t.Fatal("a watch no replica took has a place to resume from")
	}
}

// TestWatchOwnStreamCarriesUserAndCloses: a replica that serves no
// WatchMany gets the watch on a Watch stream of its own, told of the
// caller's user (the context's), and the watch's Close ends that stream
// while the caller's context goes on.
func TestWatchOwnStreamCarriesUserAndCloses(t *testing.T) {
	a := &scriptedReplica{name: "a"}
	ended := make(chan struct{})
	a.set(func(ctx context.Context, req *watchv1.WatchRequest, send func([]byte, int) error) error {
		if err := events(send, 11); err != nil {
			return err
		}
		<-ctx.Done()
		close(ended)
		return ctx.Err()
	})
	p := pool(t, a)
	ctx := identity.WithUser(t.Context(), identity.User{Name: "alice", Groups: []string{"dev"}})
	w := p.Watch(ctx, &watchv1.WatchRequest{ResourceVersion: "10"}, nil)
	if got, want := recvAll(t, w, 1), frames(added("cm-11", 11)); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	w.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the replica's stream")
	}
	if ctx.Err() != nil {
		t.Fatal("the caller's context ended")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.users) != 1 || a.users[0] != "alice" {
		t.Fatalf("the replica saw users %q, want [alice]", a.users)
	}
}
