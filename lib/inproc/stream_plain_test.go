package inproc_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/inproc"
)

type smsg struct{ n int }

func TestMessagesHeaderTrailerAndError(t *testing.T) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), "user", "alice")
	failure := status.Error(codes.NotFound, "gone")
	s := inproc.Stream(ctx, "/svc/M", &smsg{n: 3}, func(req *smsg, ss grpc.ServerStreamingServer[smsg]) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if got := md.Get("user"); len(got) != 1 || got[0] != "alice" {
			t.Errorf("incoming metadata: %v", md)
		}
		if m, ok := grpc.Method(ss.Context()); !ok || m != "/svc/M" {
			t.Errorf("method %q", m)
		}
		if err := grpc.SetHeader(ss.Context(), metadata.Pairs("h", "1")); err != nil {
			t.Error(err)
		}
		for i := range req.n {
			if err := ss.Send(&smsg{n: i}); err != nil {
				return err
			}
		}
		if err := grpc.SetHeader(ss.Context(), metadata.Pairs("late", "x")); err == nil {
			t.Error("a header set after the first message was accepted")
		}
		ss.SetTrailer(metadata.Pairs("t", "2"))
		return failure
	})
	h, err := s.Header()
	if err != nil || h.Get("h")[0] != "1" {
		t.Fatalf("header %v, %v", h, err)
	}
	for i := range 3 {
		m, err := s.Recv()
		if err != nil || m.n != i {
			t.Fatalf("message %d: %v, %v", i, m, err)
		}
	}
	if _, err := s.Recv(); !errors.Is(err, failure) {
		t.Fatalf("end: %v, want the handler's error", err)
	}
	if s.Trailer().Get("t")[0] != "2" {
		t.Fatalf("trailer %v", s.Trailer())
	}
}

func TestEOFAndHeaderWithoutMessages(t *testing.T) {
	s := inproc.Stream(context.Background(), "/svc/M", &smsg{}, func(*smsg, grpc.ServerStreamingServer[smsg]) error { return nil })
	if _, err := s.Header(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

// TestSendWaitsForTheReceiver: the handler may reuse a message once Send
// returns, because the receiver is done with it by then.
func TestSendWaitsForTheReceiver(t *testing.T) {
	sent := make(chan int, 10)
	s := inproc.Stream(context.Background(), "/svc/M", &smsg{}, func(_ *smsg, ss grpc.ServerStreamingServer[smsg]) error {
		m := &smsg{}
		for i := range 3 {
			m.n = i // reused: safe only if Send waited
			if err := ss.Send(m); err != nil {
				return err
			}
			sent <- i
		}
		return nil
	})
	m, _ := s.Recv()
	select {
	case <-sent:
		t.Fatal("Send returned while the receiver still held the message")
	case <-time.After(50 * time.Millisecond):
	}
	if m.n != 0 {
		t.Fatalf("first message changed under the receiver: %d", m.n)
	}
	for i := 1; i < 3; i++ {
		if m, err := s.Recv(); err != nil || m.n != i {
			t.Fatalf("message %d: %v %v", i, m, err)
		}
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatal(err)
	}
}

// TestCancelEndsTheHandler: a client that goes away ends the handler's
// context, as a gRPC client's cancellation does.
func TestCancelEndsTheHandler(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	s := inproc.Stream(ctx, "/svc/M", &smsg{}, func(_ *smsg, ss grpc.ServerStreamingServer[smsg]) error {
		for {
			if err := ss.Send(&smsg{}); err != nil {
				ended <- err
				return err
			}
		}
	})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not end")
	}
	if _, err := s.Recv(); err == nil {
		t.Fatal("Recv after cancel succeeded")
	}
}
