package frontend

import (
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file serves GETs of an in-process ResourceService without routing
// them through grpc-gateway's mux: the request is read from the query
// rewrite built, the service's Get is called on the request's goroutine,
// and the answer is written by grpc-gateway's own ForwardResponseMessage
// and HTTPError with the local mux's options, so the response (status,
// headers, body, errors as Kubernetes Status) is the one the mux's
// direct-call route writes. What is skipped is the route's fixed cost per
// request: the path match, the incoming gRPC metadata built from the
// HTTP headers (which no mux of ours forwards: newGatewayMux), the
// context values naming the route, and a cancellable context (the
// request's ends when the handler returns).

// serveLocalGet serves the GET that rewrite turned r into with srv.Get,
// writing as mux (the local mux, newGatewayMux) would. A request whose
// serving the mux would change otherwise than by its route (a
// Grpc-Timeout header: a deadline for the call) goes through mux.
func serveLocalGet(w http.ResponseWriter, r *http.Request, mux *runtime.ServeMux, srv apiv1.ResourceServiceServer) {
	if r.Method != http.MethodGet || r.Header.Get("Grpc-Timeout") != "" {
		mux.ServeHTTP(w, r)
		return
	}
	req := new(apiv1.GetRequest)
	if err := (queryParser{}).Parse(req, r.Form, routeFilter); err != nil {
		// As the route answers a query it cannot parse.
		runtime.HTTPError(r.Context(), mux, rawMarshaler{}, w, r, status.Errorf(codes.InvalidArgument, "%v", err))
		return
	}
	// The headers and trailers Get sets (grpc.SetHeader) are collected
	// as the route collects them, then written by the mux's options.
	var stream runtime.ServerTransportStream
	ctx := grpc.NewContextWithServerTransportStream(r.Context(), &stream)
	resp, err := srv.Get(ctx, req)
	ctx = runtime.NewServerMetadataContext(ctx, runtime.ServerMetadata{HeaderMD: stream.Header(), TrailerMD: stream.Trailer()})
	if err != nil {
		runtime.HTTPError(ctx, mux, rawMarshaler{}, w, r, err)
		return
	}
	runtime.ForwardResponseMessage(ctx, mux, rawMarshaler{}, w, r, resp, mux.GetForwardResponseOptions()...)
}
