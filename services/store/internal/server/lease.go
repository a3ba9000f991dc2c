package server

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// maxLeaseTTL bounds a lease's TTL.
const maxLeaseTTL = 24 * time.Hour

type leaseServer struct {
	storev1.UnimplementedLeaseServiceServer
	s *Server
}

// LeaseGrant grants a lease on the leader (forwarded there).
func (l *leaseServer) LeaseGrant(ctx context.Context, req *storev1.LeaseGrantRequest) (*storev1.LeaseGrantResponse, error) {
	ttl := req.GetTtl().AsDuration()
	if req.GetTtl() == nil || ttl <= 0 || ttl > maxLeaseTTL || req.GetId() < 0 {
		return nil, status.Error(codes.InvalidArgument, "store: lease ttl must be in (0, 24h] and id not negative")
	}
	resp, err := leaderCall(ctx, l.s,
		func(ctx context.Context) (*storev1.LeaseGrantResponse, error) {
			return l.s.cfg.Node.LeaseGrant(ctx, req.GetId(), ttl)
		},
		func(ctx context.Context, c *grpc.ClientConn) (*storev1.LeaseGrantResponse, error) {
			return storev1.NewLeaseServiceClient(c).LeaseGrant(ctx, req)
		})
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Header = l.s.fillHeader(resp.Header)
	return resp, nil
}

// LeaseRevoke revokes a lease and deletes its keys in one revision.
func (l *leaseServer) LeaseRevoke(ctx context.Context, req *storev1.LeaseRevokeRequest) (*storev1.LeaseRevokeResponse, error) {
	resp, err := leaderCall(ctx, l.s,
		func(ctx context.Context) (*storev1.LeaseRevokeResponse, error) {
			return l.s.cfg.Node.LeaseRevoke(ctx, req.GetId())
		},
		func(ctx context.Context, c *grpc.ClientConn) (*storev1.LeaseRevokeResponse, error) {
			return storev1.NewLeaseServiceClient(c).LeaseRevoke(ctx, req)
		})
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Header = l.s.fillHeader(resp.Header)
	return resp, nil
}

// LeaseTimeToLive reports a lease from the leader's lessor.
func (l *leaseServer) LeaseTimeToLive(ctx context.Context, req *storev1.LeaseTimeToLiveRequest) (*storev1.LeaseTimeToLiveResponse, error) {
	resp, err := leaderCall(ctx, l.s,
		func(ctx context.Context) (*storev1.LeaseTimeToLiveResponse, error) {
			return l.s.cfg.Node.LeaseTimeToLive(ctx, req.GetId(), req.GetKeys())
		},
		func(ctx context.Context, c *grpc.ClientConn) (*storev1.LeaseTimeToLiveResponse, error) {
			return storev1.NewLeaseServiceClient(c).LeaseTimeToLive(ctx, req)
		})
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Header = l.s.fillHeader(resp.Header)
	return resp, nil
}

// LeaseKeepAlive renews leases on the leader. On another member it relays
// the stream to the leader; the stream ends when leadership moves (the
// client reopens it). An unknown lease gets a response with ttl 0.
func (l *leaseServer) LeaseKeepAlive(stream grpc.BidiStreamingServer[storev1.LeaseKeepAliveRequest, storev1.LeaseKeepAliveResponse]) error {
	ctx := stream.Context()
	if !l.s.cfg.Node.IsLeader() && !isForwarded(ctx) {
		return l.relayKeepAlive(stream)
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ttl, err := l.s.cfg.Node.LeaseRenew(ctx, req.GetId())
		resp := &storev1.LeaseKeepAliveResponse{Header: l.s.header(0), Id: req.GetId(), Ttl: durationpb.New(ttl)}
		switch {
		case err == nil:
		case errIsNotLeader(err) || errors.Is(err, ErrNoLeader):
			return toStatus(err)
		case status.Code(toStatus(err)) == codes.NotFound:
			resp.Ttl = durationpb.New(0)
		default:
			return toStatus(err)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (l *leaseServer) relayKeepAlive(stream grpc.BidiStreamingServer[storev1.LeaseKeepAliveRequest, storev1.LeaseKeepAliveResponse]) error {
	conn, fctx, err := l.s.fwd.leader(stream.Context())
	if err != nil {
		return toStatus(err)
	}
	ctx, cancel := context.WithCancel(fctx)
	defer cancel()
	up, err := storev1.NewLeaseServiceClient(conn).LeaseKeepAlive(ctx)
	if err != nil {
		return toStatus(forwardErr(err))
	}
	errc := make(chan error, 2)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				_ = up.CloseSend()
				if errors.Is(err, io.EOF) {
					return
				}
				errc <- err
				return
			}
			if err := up.Send(req); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() {
		for {
			resp, err := up.Recv()
			if errors.Is(err, io.EOF) {
				errc <- nil
				return
			}
			if err != nil {
				errc <- err
				return
			}
			if err := stream.Send(resp); err != nil {
				errc <- err
				return
			}
		}
	}()
	return <-errc
}
