package inproc_test

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meridian-cp/meridian/lib/inproc"
)

// TestUnaryCallsThroughInterceptors: the interceptor sees the method, the
// caller's certificate as the peer's and the caller's outgoing metadata
// as incoming; the caller gets the handler's own message, or the error
// of the handler or of an interceptor that refuses the call; the
// handler's incoming metadata is not the caller's map.
func TestUnaryCallsThroughInterceptors(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Service/Get"}
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "gateway", Organization: []string{"meridian:gateways"}}}
	var seenCert *x509.Certificate
	var seenUser []string
	var seenMethod, transportMethod string
	refuse := false
	intercept := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		seenMethod = info.FullMethod
		transportMethod, _ = grpc.Method(ctx)
		if p, ok := peer.FromContext(ctx); ok {
			if ai, ok := p.AuthInfo.(inproc.AuthInfo); ok {
				seenCert = ai.Cert
			}
		}
		seenUser = metadata.ValueFromIncomingContext(ctx, "user")
		if refuse {
			return nil, status.Error(codes.PermissionDenied, "refused")
		}
		return handler(ctx, req)
	}
	answer := wrapperspb.Bytes([]byte("answer"))
	handler := func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.BytesValue, error) {
		if md, _ := metadata.FromIncomingContext(ctx); md != nil {
			md.Set("user", "changed by the handler")
		}
		if req.Value == "missing" {
			return nil, status.Error(codes.NotFound, "no "+req.Value)
		}
		return answer, nil
	}
	bind := func(info *grpc.UnaryServerInfo, h grpc.UnaryHandler) grpc.UnaryHandler {
		return func(ctx context.Context, req any) (any, error) { return intercept(ctx, req, info, h) }
	}
	m := inproc.NewUnaryMethod(cert, info, bind, handler)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "user", "alice")
	for _, tc := range []struct {
		req    string
		refuse bool
		code   codes.Code
		msg    string
	}{{"thing", false, codes.OK, ""}, {"missing", false, codes.NotFound, "no missing"}, {"thing", true, codes.PermissionDenied, "refused"}} {
		refuse = tc.refuse
		seenCert, seenUser, seenMethod, transportMethod = nil, nil, "", ""
		resp, err := m.Call(ctx, wrapperspb.String(tc.req))
		if s, _ := status.FromError(err); s.Code() != tc.code || s.Message() != tc.msg {
			t.Errorf("%s, refuse=%v: got %v, want %v %q", tc.req, tc.refuse, err, tc.code, tc.msg)
		}
		if wantResp := tc.code == codes.OK; (resp == answer) != wantResp {
			t.Errorf("%s, refuse=%v: got response %p, want the handler's %p: %v", tc.req, tc.refuse, resp, answer, wantResp)
		}
		if seenCert != cert || len(seenUser) != 1 || seenUser[0] != "alice" || seenMethod != info.FullMethod || transportMethod != info.FullMethod {
			t.Errorf("%s, refuse=%v: the interceptor saw cert %v, user %q, method %q (transport %q)", tc.req, tc.refuse, seenCert, seenUser, seenMethod, transportMethod)
		}
		if md, _ := metadata.FromOutgoingContext(ctx); len(md["user"]) != 1 || md["user"][0] != "alice" {
			t.Errorf("%s: the caller's metadata became %v", tc.req, md)
		}
	}
}
