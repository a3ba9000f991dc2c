// Package grpcapi is the gateway's gRPC front door: meridian.api.v1.
// ResourceService for gRPC clients, with the same authentication (a client
// certificate, or a bearer token in the "authorization" metadata) and the
// same flow control as the REST surface, and the gRPC health service.
package grpcapi

import (
	"context"
	"strings"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Config configures the gRPC front door.
type Config struct {
	// Server are the common server options (TLS, metrics, logging). Its
	// TLS must request client certificates for certificate authentication.
	Server grpcserver.Options
	// Authenticator authenticates callers. Required.
	Authenticator *authn.Authenticator
	// FlowControl hands out seats; nil serves every call at once.
	FlowControl *flowclient.Client
	// Resources is the ResourceService implementation. Required.
	Resources apiv1.ResourceServiceServer
}

// New returns the gRPC server, not yet serving.
func New(cfg Config) (*grpc.Server, error) {
	opts, err := grpcserver.ServerOptions(cfg.Server)
	if err != nil {
		return nil, err
	}
	g := &gate{authn: cfg.Authenticator, fc: cfg.FlowControl}
	opts = append(opts, grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream))
	srv := grpc.NewServer(opts...)
	apiv1.RegisterResourceServiceServer(srv, cfg.Resources)
	hs := health.NewServer()
	hs.SetServingStatus(apiv1.ResourceService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	return srv, nil
}

// gate authenticates every call and takes seats for it.
type gate struct {
	authn *authn.Authenticator
	fc    *flowclient.Client
}

// exempt are the methods open to anyone: health checks.
func exempt(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

func (g *gate) admit(ctx context.Context, method string, req any) (context.Context, func(), error) {
	if exempt(method) {
		return ctx, func() {}, nil
	}
	creds := authn.Credentials{}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			creds.TLS = &ti.State
		}
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			creds.Authorization = v[0]
		}
	}
	u, ok, err := g.authn.Authenticate(creds)
	if err != nil || !ok {
		return nil, nil, apistatus.ToGRPC(apierrors.NewUnauthorized("Unauthorized"))
	}
	ctx = identity.WithUser(ctx, u)
	digest := &flowcontrolv1.RequestDigest{Verb: verb(method), IsResourceRequest: true, Path: method}
	if r, ok := req.(interface{ GetRef() *apiv1.ResourceRef }); ok {
		ref := r.GetRef()
		digest.ApiGroup, digest.Resource, digest.Subresource = ref.GetGroup(), ref.GetResource(), ref.GetSubresource()
		digest.Namespace, digest.Name = ref.GetNamespace(), ref.GetName()
	}
	grant, err := g.fc.Acquire(ctx, digest)
	if err != nil {
		return nil, nil, apistatus.ToGRPC(err)
	}
	return ctx, grant.Release, nil
}

// verb is the Kubernetes verb of a ResourceService method.
func verb(method string) string {
	m := method[strings.LastIndex(method, "/")+1:]
	return strings.ToLower(m)
}

func (g *gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, release, err := g.admit(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	defer release()
	return h(ctx, req)
}

// stream admits a stream on its first message (the request of a
// server-streaming call). A watch holds its seats only while it starts.
func (g *gate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if exempt(info.FullMethod) {
		return h(srv, ss)
	}
	return h(srv, &gatedStream{ServerStream: ss, gate: g, method: info.FullMethod})
}

type gatedStream struct {
	grpc.ServerStream
	gate     *gate
	method   string
	ctx      context.Context
	admitted bool
}

func (s *gatedStream) Context() context.Context {
	if s.ctx != nil {
		return s.ctx
	}
	return s.ServerStream.Context()
}

func (s *gatedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.admitted {
		return nil
	}
	ctx, release, err := s.gate.admit(s.ServerStream.Context(), s.method, m)
	if err != nil {
		return err
	}
	release()
	s.ctx, s.admitted = ctx, true
	return nil
}
