package frontend

import (
	"context"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// passedHeaders are the gRPC response headers written to HTTP responses as
// they are (grpc-gateway would otherwise prefix them with Grpc-Metadata-).
var passedHeaders = map[string]bool{"warning": true, "retry-after": true, "audit-id": true}

// passedHeader reports whether a gRPC response header goes to the HTTP
// response: those of passedHeaders and the flow-control ones.
func passedHeader(k string) bool {
	k = strings.ToLower(k)
	return passedHeaders[k] || strings.HasPrefix(k, "x-kubernetes-pf-")
}

// newGatewayMux builds the grpc-gateway mux of the internal routes: raw
// bytes in and out, Kubernetes Status errors, and no HTTP request header
// forwarded as gRPC metadata: the front end has already read what matters
// and put it in the request's context (the caller's identity, the
// User-Agent), which the in-process handlers receive as it is.
func newGatewayMux() *runtime.ServeMux {
	return runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, rawMarshaler{}),
		runtime.WithErrorHandler(errorHandler),
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingHeaderMatcher(func(k string) (string, bool) {
			if passedHeader(k) {
				return textproto.CanonicalMIMEHeaderKey(k), true
			}
			return "", false
		}),
		runtime.WithForwardResponseOption(setStatusCode),
		runtime.WithDisableChunkedEncoding(),
		useQueryParser(),
	)
}

// setStatusCode writes the HTTP status a ResourceService method asked for
// (201 for a create).
func setStatusCode(ctx context.Context, w http.ResponseWriter, _ proto.Message) error {
	md, ok := runtime.ServerMetadataFromContext(ctx)
	if !ok {
		return nil
	}
	if v := md.HeaderMD.Get(resources.HTTPCodeHeader); len(v) > 0 {
		if code, err := strconv.Atoi(v[0]); err == nil && code >= 200 && code < 300 {
			w.WriteHeader(code)
		}
	}
	return nil
}

// errorHandler writes a gRPC error as the Kubernetes Status it carries.
func errorHandler(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	if md, ok := runtime.ServerMetadataFromContext(ctx); ok {
		for _, k := range []string{"warning", "retry-after"} {
			for _, v := range md.HeaderMD.Get(k) {
				w.Header().Add(textproto.CanonicalMIMEHeaderKey(k), v)
			}
		}
	}
	writeStatus(w, apistatus.FromGRPC(status.Convert(err)))
}
