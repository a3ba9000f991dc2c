package batchcodec

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec/batchcodectest"
)

// Messages and frame sizes of the gRPC tests: 4 MiB per stream, far more
// than HTTP/2 flow control and gRPC's write quota (64 KiB per stream)
// let through while the client does not read.
const (
	grpcMessages = 256
	grpcFrame    = 8 << 10 // two frames per message: 16 KiB, built in place
)

// fakeWatch sends grpcMessages encoded batches per watch, with one
// ordinary WatchResponse in the middle.
type fakeWatch struct {
	watchv1.UnimplementedWatchServiceServer
	pool *batchcodectest.CheckPool
	sent chan struct{} // closed when a handler has sent everything
}

func (f *fakeWatch) send(many bool, id int64, sendMsg func(any) error, plain func() error) error {
	b := NewBuilder(f.pool, many, id, 32<<10-64)
	var m Message
	defer m.Release()
	for i := range grpcMessages {
		if i == grpcMessages/2 {
			if err := plain(); err != nil {
				return err
			}
		}
		b.Add(frame(2*i, grpcFrame))
		b.Add(frame(2*i+1, grpcFrame))
		b.Finish(int64(i+1), &m)
		if err := sendMsg(&m); err != nil {
			return err
		}
	}
	close(f.sent)
	return nil
}

func (f *fakeWatch) Watch(_ *watchv1.WatchRequest, stream watchv1.WatchService_WatchServer) error {
	return f.send(false, 0, stream.SendMsg, func() error {
		return stream.Send(&watchv1.WatchResponse{Frames: []byte("plain")})
	})
}

func (f *fakeWatch) WatchMany(stream watchv1.WatchService_WatchManyServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	id := req.GetOpen().GetId()
	return f.send(true, id, stream.SendMsg, func() error {
		return stream.Send(&watchv1.WatchManyResponse{Id: id, Response: &watchv1.WatchResponse{Frames: []byte("plain")}})
	})
}

// TestGRPCBufferLifetime sends encoded batches to a client that does not
// read until the server has sent them all: SendMsg returns while most are
// still queued in gRPC. The pool overwrites and reuses each buffer the
// moment it comes back, so a buffer given back before gRPC wrote it
// would reach the client corrupted. Every message must arrive intact, and
// every buffer must come back.
func TestGRPCBufferLifetime(t *testing.T) {
	for _, many := range []bool{false, true} {
		t.Run("many="+strconv.FormatBool(many), func(t *testing.T) {
			pool := batchcodectest.New(t)
			codec, err := NewCodec()
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(grpc.ForceServerCodecV2(codec))
			fake := &fakeWatch{pool: pool, sent: make(chan struct{})}
			watchv1.RegisterWatchServiceServer(srv, fake)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			// Fixed small windows: no BDP growth, so the server's writes
			// wait for the client.
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := watchv1.NewWatchServiceClient(cc)
			var recv func() (*watchv1.WatchResponse, error)
			const id = 77
			if many {
				st, err := client.WatchMany(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Send(&watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Open{Open: &watchv1.WatchOpen{Id: id}}}); err != nil {
					t.Fatal(err)
				}
				recv = func() (*watchv1.WatchResponse, error) {
					r, err := st.Recv()
					if err == nil && r.GetId() != id {
						t.Fatalf("id %d, want %d", r.GetId(), id)
					}
					return r.GetResponse(), err
				}
			} else {
				st, err := client.Watch(ctx, &watchv1.WatchRequest{})
				if err != nil {
					t.Fatal(err)
				}
				recv = st.Recv
			}
			// Let the server queue everything before reading.
			select {
			case <-fake.sent:
			case <-time.After(2 * time.Second):
				// Flow control held the handler in SendMsg: the messages
				// queued so far are the ones under test.
			}
			for i := 0; i < grpcMessages; i++ {
				if i == grpcMessages/2 {
					r, err := recv()
					if err != nil || string(r.GetFrames()) != "plain" {
						t.Fatalf("plain message: %v %v", r, err)
					}
				}
				r, err := recv()
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				want := append(frame(2*i, grpcFrame), frame(2*i+1, grpcFrame)...)
				if !bytes.Equal(r.GetFrames(), want) {
					t.Fatalf("message %d corrupted (head %q)", i, head(r.GetFrames()))
				}
				if r.GetResourceVersion() != strconv.Itoa(i+1) {
					t.Fatalf("message %d: resourceVersion %q", i, r.GetResourceVersion())
				}
			}
			cancel()
			cc.Close()
			srv.Stop()
			if n := pool.AwaitReturned(5 * time.Second); n != 0 {
				t.Fatalf("%d buffers never given back", n)
			}
		})
	}
}
