// Package grpcservertest serves a gRPC server on loopback for the length of
// a test, and describes a small test service to register on it.
package grpcservertest

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
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

// Handler answers one call of a service described by Desc.
type Handler func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

// Desc describes a service called name with two methods taking and
// answering a StringValue: "Unary", answered by unary through the server's
// unary interceptors as generated code does, and the server-streaming
// "Stream", whose one request stream answers with one message. Register it
// with srv.RegisterService(desc, nil); call it with conn.Invoke(ctx,
// "/<name>/Unary", ...) and conn.NewStream(ctx, &desc.Streams[0],
// "/<name>/Stream").
func Desc(name string, unary, stream Handler) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: name,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Unary",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, req any) (any, error) { return unary(ctx, req.(*wrapperspb.StringValue)) }
				if ic == nil {
					return h(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/" + name + "/Unary"}, h)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Stream",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				out, err := stream(ss.Context(), in)
				if err != nil {
					return err
				}
				return ss.SendMsg(out)
			},
		}},
	}
}

// CallUnary calls the Unary method of the service desc describes (made by
// Desc) on conn with in and returns the answer's value or the call's
// error.
func CallUnary(ctx context.Context, conn grpc.ClientConnInterface, desc *grpc.ServiceDesc, in string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, "/"+desc.ServiceName+"/Unary", wrapperspb.String(in), out)
	return out.GetValue(), err
}

// CallStream calls the Stream method of the service desc describes (made
// by Desc) on conn with in and returns the value of the one message it
// answers, or the call's error.
func CallStream(ctx context.Context, conn grpc.ClientConnInterface, desc *grpc.ServiceDesc, in string) (string, error) {
	st, err := OpenStream(ctx, conn, &desc.Streams[0], "/"+desc.ServiceName+"/"+desc.Streams[0].StreamName, wrapperspb.String(in))
	if err != nil {
		return "", err
	}
	out := new(wrapperspb.StringValue)
	err = st.RecvMsg(out)
	return out.GetValue(), err
}

// OpenStream opens the server-streaming method sd (whose full name is
// method) on conn, sends in and closes the sending side; the caller
// receives the answers, and the call's status with the last RecvMsg (also
// when the server ended the call before reading in).
func OpenStream(ctx context.Context, conn grpc.ClientConnInterface, sd *grpc.StreamDesc, method string, in any) (grpc.ClientStream, error) {
	st, err := conn.NewStream(ctx, sd, method)
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(in); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	return st, nil
}
