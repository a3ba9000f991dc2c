package client

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// flakyKV fails the first Txn of every kind with a plain UNAVAILABLE (one
// that does not prove the request was not proposed).
type flakyKV struct {
	storev1.UnimplementedKVServiceServer
	calls atomic.Int32
}

func (f *flakyKV) Txn(ctx context.Context, req *storev1.TxnRequest) (*storev1.TxnResponse, error) {
	if f.calls.Add(1) == 1 {
		return nil, status.Error(codes.Unavailable, "leader lost")
	}
	return &storev1.TxnResponse{Succeeded: true}, nil
}

// TestReadOnlyTxnIsRetried: a transaction that only reads is retried after
// an UNAVAILABLE, like a Range; one that writes is not (it may have been
// applied).
func TestReadOnlyTxnIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name      string
		op        *storev1.RequestOp
		wantCalls int32
	}{
		{"read", &storev1.RequestOp{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte("k")}}}, 2},
		{"write", &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte("k")}}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			kv := &flakyKV{}
			storev1.RegisterKVServiceServer(srv, kv)
			go srv.Serve(lis)
			defer srv.Stop()
			c, err := Dial([]string{lis.Addr().String()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.KV().Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{tc.op}})
			if got := kv.calls.Load(); got != tc.wantCalls || (err == nil) != (tc.wantCalls == 2) {
				t.Fatalf("%d calls, error %v; want %d calls", got, err, tc.wantCalls)
			}
		})
	}
}
