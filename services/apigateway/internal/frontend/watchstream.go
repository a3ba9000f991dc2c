package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchpark"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// This file serves watches of an in-process ResourceService without
// grpc-gateway: the service's Watch runs on the request's goroutine and
// each message it sends is written to the HTTP response and flushed at
// once. Through grpc-gateway a watch would need a client stream
// (inproc.Stream): a second goroutine per watch, and a hand-over between
// the two for every message.
//
// The response is what grpc-gateway's ForwardResponseStream writes with
// the mux's options (newGatewayMux): the headers the service set (those
// passedHeader lets through) and its first message's media type; each
// message's data as it is, flushed; an error before the first message as
// its Status with the Status's code (streamErrorWriter), and one after as
// a Status object appended to the stream.
//
// Over HTTP/2 (h2conn) a watch parks while idle (package watchpark): the
// handler returns with the stream still open, and each later message is
// sent by the goroutine its wake-up starts, through the same watchStream
// and the same writes; the response ends with the watch.

// routeFilter is the (empty) path-parameter filter of the get and watch
// routes: every query parameter fills the request.
var routeFilter = &utilities.DoubleArray{Encoding: map[string]int{}}

// serveLocalWatch serves the watch that rewrite turned r into with
// srv.Watch. w is the response writer of a streamed response
// (streamErrorWriter).
//
// Unless it parks (watchpark), the watch waits on this goroutine for as
// long as it lasts, under this frame (see Handler.serve): the query's
// parsing is done by parseWatchRequest, whose frame has gone by then.
func serveLocalWatch(w http.ResponseWriter, r *http.Request, srv apiv1.ResourceServiceServer) {
	req := parseWatchRequest(w, r)
	if req == nil {
		return
	}
	// The request's context ends when the watch does, as a gRPC call's
	// does when its handler returns: here when this handler returns, or,
	// for a parked watch, whose stream outlives the handler, at its end
	// (watchpark).
	s := &watchStream{w: w, rc: http.NewResponseController(w), done: r.Context().Done()}
	s.ctx = grpc.NewContextWithServerTransportStream(r.Context(), (*watchTransport)(s))
	err := srv.Watch(req, s)
	if errors.Is(err, watchpark.ErrParked) {
		// The watch goes on parked; its error comes with its end.
		ho := watchpark.From(r.Context())
		ho.Defer(func() { s.ended(ho.Err()) })
		return
	}
	s.ended(err)
}

// ended writes the error the watch ended with, if any.
func (s *watchStream) ended(err error) {
	if err != nil && !errors.Is(err, io.EOF) {
		writeStreamError(s.w, s.wroteHeader, err)
	}
}

// parseWatchRequest reads a watch's request from r's query, or answers
// 400 and returns nil.
func parseWatchRequest(w http.ResponseWriter, r *http.Request) *apiv1.WatchRequest {
	req := new(apiv1.WatchRequest)
	if err := (queryParser{}).Parse(req, r.Form, routeFilter); err != nil {
		// As grpc-gateway answers a query it cannot parse (errorHandler).
		writeStatus(w, apistatus.FromGRPC(status.New(codes.InvalidArgument, err.Error())))
		return nil
	}
	return req
}

// writeStreamError writes err, a gRPC status, as a Kubernetes Status: the
// whole response when nothing was written yet, else appended to the stream.
func writeStreamError(w http.ResponseWriter, wroteHeader bool, err error) {
	st := apistatus.FromGRPC(status.Convert(err))
	data, merr := json.Marshal(statusObject(st))
	if merr != nil {
		return
	}
	if !wroteHeader {
		// streamErrorWriter writes the Status's own code (and
		// Retry-After) in place of the one given here.
		w.Header().Set("Content-Type", negotiation.JSON)
		w.WriteHeader(runtime.HTTPStatusFromCode(status.Code(err)))
	}
	_, _ = w.Write(data)
}

// watchStream is the server end of one watch, writing to the HTTP
// response. Like a gRPC server stream, it is used by one goroutine at a
// time: the handler's, or a parked watch's wake-up's; mu guards the
// header against grpc.SetHeader from another goroutine of the handler.
type watchStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	ctx context.Context
	// done is ctx's Done, looked up once: Send checks it for every
	// message, where ctx.Err would walk the request's chain of contexts.
	done <-chan struct{}

	mu          sync.Mutex
	header      metadata.MD
	wroteHeader bool
}

var _ apiv1.ResourceService_WatchServer = (*watchStream)(nil)

// Send writes m's data to the response and flushes it; the first Send
// writes the headers, with m's media type.
func (s *watchStream) Send(m *httpbody.HttpBody) error {
	select {
	case <-s.done:
		return s.ctx.Err()
	default:
	}
	s.mu.Lock()
	first := !s.wroteHeader
	s.wroteHeader = true
	header := s.header
	s.mu.Unlock()
	if first {
		h := s.w.Header()
		for k, vs := range header {
			if passedHeader(k) {
				for _, v := range vs {
					h.Add(textproto.CanonicalMIMEHeaderKey(k), v)
				}
			}
		}
		h.Set("Content-Type", rawMarshaler{}.ContentType(m))
	}
	if _, err := s.w.Write(m.GetData()); err != nil {
		return err
	}
	return s.rc.Flush()
}

var errHeaderSent = errors.New("frontend: watch header already sent")

// SetHeader adds md to the headers, until the first Send.
func (s *watchStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wroteHeader {
		return errHeaderSent
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

// SendHeader adds md to the headers; they are written with the first
// message, as the response's media type is its.
func (s *watchStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

// SetTrailer does nothing: an HTTP watch response has no trailers
// (grpc-gateway writes none for a streamed response either).
func (s *watchStream) SetTrailer(metadata.MD) {}

// Context is the watch's context: the request's, which ends when the
// handler returns.
func (s *watchStream) Context() context.Context { return s.ctx }

// SendMsg sends an *httpbody.HttpBody.
func (s *watchStream) SendMsg(m any) error {
	b, ok := m.(*httpbody.HttpBody)
	if !ok {
		return errors.New("frontend: a watch sends google.api.HttpBody only")
	}
	return s.Send(b)
}

// RecvMsg has nothing to receive: the request came from the query.
func (s *watchStream) RecvMsg(any) error { return errors.New("frontend: a watch receives no message") }

// watchTransport lets grpc.SetHeader and friends work on the watch's
// context.
type watchTransport watchStream

func (t *watchTransport) Method() string { return apiv1.ResourceService_Watch_FullMethodName }
func (t *watchTransport) SetHeader(md metadata.MD) error {
	return (*watchStream)(t).SetHeader(md)
}
func (t *watchTransport) SendHeader(md metadata.MD) error {
	return (*watchStream)(t).SendHeader(md)
}
func (t *watchTransport) SetTrailer(metadata.MD) error { return nil }
