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

// renewWait bounds how long one keep-alive request is retried while
// leadership moves (a few elections; see leaderWait).
const renewWait = 2 * leaderWait

// LeaseKeepAlive renews leases on the leader and answers each request in
// order. Any member accepts the stream: one that is not the leader relays
// the renewals to the leader (keepAliveRelay). A renewal goes through no
// log and only restarts the lease's TTL, so a renewal refused or lost
// while leadership moves is sent again, to the new leader, for up to
// renewWait: an election does not end the client's stream. A stream
// forwarded by another member is served here only, and ends when this
// member is not the leader (the relaying member then reopens it). An
// unknown lease gets a response with ttl 0.
func (l *leaseServer) LeaseKeepAlive(stream grpc.BidiStreamingServer[storev1.LeaseKeepAliveRequest, storev1.LeaseKeepAliveResponse]) error {
	ctx := stream.Context()
	relay := &keepAliveRelay{s: l.s}
	defer relay.close()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := l.renewRetrying(ctx, relay, req)
		if err != nil {
			return toStatus(err)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// renewRetrying renews req's lease, retrying an UNAVAILABLE failure (no
// leader, not the leader, the relay to the leader broken) until renewWait
// has passed or ctx ends. A forwarded stream is not retried here.
func (l *leaseServer) renewRetrying(ctx context.Context, relay *keepAliveRelay, req *storev1.LeaseKeepAliveRequest) (*storev1.LeaseKeepAliveResponse, error) {
	deadline := time.Now().Add(renewWait)
	backoff := 10 * time.Millisecond
	for {
		resp, err := l.renew(ctx, relay, req)
		if err == nil || isForwarded(ctx) || status.Code(toStatus(err)) != codes.Unavailable || time.Now().After(deadline) {
			return resp, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// renew makes one attempt: on the leader (or for a forwarded stream)
// locally, elsewhere through relay.
func (l *leaseServer) renew(ctx context.Context, relay *keepAliveRelay, req *storev1.LeaseKeepAliveRequest) (*storev1.LeaseKeepAliveResponse, error) {
	if !l.s.cfg.Node.IsLeader() && !isForwarded(ctx) {
		return relay.renew(ctx, req)
	}
	relay.close()
	ttl, err := l.s.cfg.Node.LeaseRenew(ctx, req.GetId())
	if status.Code(toStatus(err)) == codes.NotFound {
		ttl, err = 0, nil
	}
	if err != nil {
		return nil, err
	}
	return &storev1.LeaseKeepAliveResponse{Header: l.s.header(0), Id: req.GetId(), Ttl: durationpb.New(ttl)}, nil
}

// keepAliveRelay sends the renewals of one client stream to the leader
// over one forwarded stream, opened on first use and dropped on any
// failure (the next renewal opens one to the leader of the moment). It
// belongs to the goroutine of the client stream's handler: no locking.
type keepAliveRelay struct {
	s      *Server
	up     grpc.BidiStreamingClient[storev1.LeaseKeepAliveRequest, storev1.LeaseKeepAliveResponse]
	cancel context.CancelFunc
}

// renew sends req to the leader and returns its answer. The leader
// answers a stream's requests in order, one each, and renew waits for the
// answer before returning, so the answer is req's.
func (r *keepAliveRelay) renew(ctx context.Context, req *storev1.LeaseKeepAliveRequest) (*storev1.LeaseKeepAliveResponse, error) {
	if r.up == nil {
		conn, fctx, err := r.s.fwd.leader(ctx)
		if err != nil {
			return nil, err
		}
		uctx, cancel := context.WithCancel(fctx)
		up, err := storev1.NewLeaseServiceClient(conn).LeaseKeepAlive(uctx)
		if err != nil {
			cancel()
			return nil, forwardErr(err)
		}
		r.up, r.cancel = up, cancel
	}
	err := r.up.Send(req)
	var resp *storev1.LeaseKeepAliveResponse
	if err == nil || errors.Is(err, io.EOF) {
		// On io.EOF the stream has ended; Recv returns its status.
		resp, err = r.up.Recv()
	}
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "store: the leader ended the keep-alive stream")
	}
	if err != nil {
		r.close()
		return nil, forwardErr(err)
	}
	return resp, nil
}

// close drops the forwarded stream, if any.
func (r *keepAliveRelay) close() {
	if r.up != nil {
		_ = r.up.CloseSend()
		r.cancel()
		r.up, r.cancel = nil, nil
	}
}
