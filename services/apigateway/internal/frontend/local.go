package frontend

import (
	"context"

	"github.com/meridian-cp/meridian/lib/inproc"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// localClient is the ResourceService client of a server in this process.
// grpc-gateway streams only through a client: localClient runs the
// server's streaming handlers through inproc.Stream, handing each list page
// over without encoding it. Gets are served by serveLocalGet, the other
// unary methods by grpc-gateway's direct-call routes and watches by
// serveLocalWatch; none comes here (Watch is here for the route
// grpc-gateway registers).
type localClient struct {
	srv apiv1.ResourceServiceServer
}

var _ apiv1.ResourceServiceClient = localClient{}

func (l localClient) List(ctx context.Context, in *apiv1.ListRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[httpbody.HttpBody], error) {
	return inproc.Stream(ctx, apiv1.ResourceService_List_FullMethodName, in, l.srv.List), nil
}

func (l localClient) Watch(ctx context.Context, in *apiv1.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[httpbody.HttpBody], error) {
	return inproc.Stream(ctx, apiv1.ResourceService_Watch_FullMethodName, in, l.srv.Watch), nil
}

var errUnaryThroughClient = status.Error(codes.Internal, "frontend: unary calls take the direct route")

func (localClient) Get(context.Context, *apiv1.GetRequest, ...grpc.CallOption) (*httpbody.HttpBody, error) {
	return nil, errUnaryThroughClient
}

func (localClient) Create(context.Context, *apiv1.CreateRequest, ...grpc.CallOption) (*httpbody.HttpBody, error) {
	return nil, errUnaryThroughClient
}

func (localClient) Update(context.Context, *apiv1.UpdateRequest, ...grpc.CallOption) (*httpbody.HttpBody, error) {
	return nil, errUnaryThroughClient
}

func (localClient) Patch(context.Context, *apiv1.PatchRequest, ...grpc.CallOption) (*httpbody.HttpBody, error) {
	return nil, errUnaryThroughClient
}

func (localClient) Delete(context.Context, *apiv1.DeleteRequest, ...grpc.CallOption) (*httpbody.HttpBody, error) {
	return nil, errUnaryThroughClient
}

func (localClient) DeleteCollection(context.Context, *apiv1.DeleteCollectionRequest, ...grpc.CallOption) (*httpbody.HttpBody, error) {
	return nil, errUnaryThroughClient
}
