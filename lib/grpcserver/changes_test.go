package grpcserver_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/grpcserver/grpcservertest"
)

// value is a string that changes; each version has a channel closed when
// the next one replaces it.
type value struct {
	mu      sync.Mutex
	v       string
	changed chan struct{}
}

func (v *value) get() (*wrapperspb.StringValue, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return wrapperspb.String(v.v), v.changed
}

func (v *value) set(s string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.v = s
	close(v.changed)
	v.changed = make(chan struct{})
}

// TestSendChanges: a stream gets the value, then each new one; the end of
// the call ends the handler with the context's code; Close ends open
// streams and new ones with UNAVAILABLE naming the service.
func TestSendChanges(t *testing.T) {
	val := &value{v: "v1", changed: make(chan struct{})}
	changes := grpcserver.NewChanges("test")
	ended := make(chan error, 4)
	desc := &grpc.ServiceDesc{
		ServiceName: "test.Changes",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Follow",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
					return err
				}
				err := grpcserver.SendChanges(changes, &grpc.GenericServerStream[wrapperspb.StringValue, wrapperspb.StringValue]{ServerStream: ss}, val.get)
				ended <- err
				return err
			},
		}},
	}
	srv := grpc.NewServer()
	srv.RegisterService(desc, nil)
	conn, err := grpc.NewClient(grpcservertest.Serve(t, srv), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	follow := func(ctx context.Context) grpc.ClientStream {
		t.Helper()
		st, err := grpcservertest.OpenStream(ctx, conn, &desc.Streams[0], "/test.Changes/Follow", wrapperspb.String(""))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	recv := func(st grpc.ClientStream) (string, error) {
		out := new(wrapperspb.StringValue)
		err := st.RecvMsg(out)
		return out.Value, err
	}

	ctx, cancel := context.WithCancel(t.Context())
	st := follow(ctx)
	if v, err := recv(st); err != nil || v != "v1" {
		t.Fatalf("first message %q %v, want v1", v, err)
	}
	val.set("v2")
	if v, err := recv(st); err != nil || v != "v2" {
		t.Fatalf("after a change %q %v, want v2", v, err)
	}
	cancel()
	if err := <-ended; status.Code(err) != codes.Canceled {
		t.Fatalf("handler after the caller hung up: %v, want Canceled", err)
	}

	st = follow(t.Context())
	if v, err := recv(st); err != nil || v != "v2" {
		t.Fatalf("first message %q %v, want v2", v, err)
	}
	changes.Close()
	changes.Close()
	if _, err := recv(st); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "test: shutting down" {
		t.Fatalf("open stream after Close: %v, want Unavailable test: shutting down", err)
	}
	if _, err := recv(follow(t.Context())); status.Code(err) != codes.Unavailable {
		t.Fatalf("new stream after Close: %v, want Unavailable", err)
	}
}
