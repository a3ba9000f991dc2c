// Package grpcservertest serves a gRPC server on loopback for the length of
// a test.
package grpcservertest

import (
	"net"
	"testing"

	"google.golang.org/grpc"
)

// Serve serves srv on a new listener on 127.0.0.1 and returns its address.
// srv is stopped (Stop, not GracefulStop: a test's open streams must not
// hold up its end) when the test ends.
func Serve(t testing.TB, srv *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}
