package inproc_test

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meridian-cp/meridian/lib/inproc"
)

var streamInfo = &grpc.StreamServerInfo{FullMethod: "/test.Service/List", IsServerStream: true}

// passThrough is an interceptor chain that lets every call through.
func passThrough(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, ss)
}

// TestServerStreamHandsOverMessages: the caller receives the very
// messages the handler sends, in order, then io.EOF; each Send returns
// only after the caller is done with the message (has asked for the
// next), so a handler may reuse what it sent.
func TestServerStreamHandsOverMessages(t *testing.T) {
	sent := []*wrapperspb.BytesValue{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}}
	var mu sync.Mutex
	var log []string
	note := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
	}
	handler := func(req *wrapperspb.StringValue, ss grpc.ServerStreamingServer[wrapperspb.BytesValue]) error {
		for _, m := range sent {
			if err := ss.Send(m); err != nil {
				return err
			}
			note("sent " + string(m.Value))
		}
		return nil
	}
	cs := inproc.ServerStream(t.Context(), nil, streamInfo, passThrough, nil, wrapperspb.String("req"), handler)
	for i, want := range sent {
		got, err := cs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("message %d: got %p (%q), want the message sent, %p", i, got, got.Value, want)
		}
		note("received " + string(got.Value))
	}
	if _, err := cs.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
	want := []string{"received a", "sent a", "received b", "sent b", "received c", "sent c"}
	mu.Lock()
	defer mu.Unlock()
	if len(log) != len(want) {
		t.Fatalf("order %q, want %q", log, want)
	}
	for i := range want {
		if log[i] != want[i] {
			t.Fatalf("order %q, want %q", log, want)
		}
	}
}

// TestServerStreamCallsThroughInterceptors: the interceptor sees the
// method, a peer holding the certificate given (as a connection dialed
// with DialOptions carries) and the caller's outgoing metadata as
// incoming; a refusal by the interceptor, or the handler's error, is what
// the caller receives.
func TestServerStreamCallsThroughInterceptors(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "gateway", Organization: []string{"meridian:gateways"}}}
	var seenCert *x509.Certificate
	var seenUser []string
	var seenMethod string
	refuse := false
	intercept := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		seenMethod = info.FullMethod
		if p, ok := peer.FromContext(ss.Context()); ok {
			if ai, ok := p.AuthInfo.(inproc.AuthInfo); ok {
				seenCert = ai.Cert
			}
		}
		seenUser = metadata.ValueFromIncomingContext(ss.Context(), "user")
		if refuse {
			return status.Error(codes.PermissionDenied, "refused")
		}
		return handler(srv, ss)
	}
	handler := func(req *wrapperspb.StringValue, ss grpc.ServerStreamingServer[wrapperspb.BytesValue]) error {
		return status.Error(codes.NotFound, "no "+req.Value)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "user", "alice")
	for _, tc := range []struct {
		refuse bool
		code   codes.Code
		msg    string
	}{{false, codes.NotFound, "no thing"}, {true, codes.PermissionDenied, "refused"}} {
		refuse = tc.refuse
		seenCert, seenUser, seenMethod = nil, nil, ""
		cs := inproc.ServerStream(ctx, cert, streamInfo, intercept, nil, wrapperspb.String("thing"), handler)
		_, err := cs.Recv()
		if s, _ := status.FromError(err); s.Code() != tc.code || s.Message() != tc.msg {
			t.Errorf("refuse=%v: got %v, want %v %q", tc.refuse, err, tc.code, tc.msg)
		}
		if seenCert != cert || len(seenUser) != 1 || seenUser[0] != "alice" || seenMethod != streamInfo.FullMethod {
			t.Errorf("refuse=%v: the interceptor saw cert %v, user %q, method %q", tc.refuse, seenCert, seenUser, seenMethod)
		}
	}
}

// TestServerStreamCancel: cancelling the caller's context ends a handler
// waiting in Send with the context's error, and the caller's Recv.
func TestServerStreamCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan error, 1)
	handler := func(_ *wrapperspb.StringValue, ss grpc.ServerStreamingServer[wrapperspb.BytesValue]) error {
		for {
			if err := ss.Send(&wrapperspb.BytesValue{}); err != nil {
				ended <- err
				return err
			}
		}
	}
	cs := inproc.ServerStream(ctx, nil, streamInfo, passThrough, nil, wrapperspb.String(""), handler)
	if _, err := cs.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("handler's Send: %v, want context.Canceled", err)
	}
	if _, err := cs.Recv(); err == nil {
		t.Error("Recv after cancel: no error")
	}
}
