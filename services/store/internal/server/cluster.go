package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

type clusterServer struct {
	storev1.UnimplementedClusterServiceServer
	s *Server
}

// members lists the raft configuration with client addresses.
func (c *clusterServer) members(ctx context.Context) ([]*storev1.Member, error) {
	ms, err := c.s.cfg.Node.Members(ctx)
	if err != nil {
		return nil, err
	}
	addrs, err := c.s.cfg.Members()
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		m.ClientAddress = addrs[m.GetId()]
	}
	return ms, nil
}

// MemberList lists the raft configuration as this member knows it.
func (c *clusterServer) MemberList(ctx context.Context, _ *storev1.MemberListRequest) (*storev1.MemberListResponse, error) {
	ms, err := c.members(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storev1.MemberListResponse{Header: c.s.header(0), Members: ms}, nil
}

// MemberAdd adds a member (on the leader; forwarded there). Adding an
// existing member with the same peer address only updates its client
// address; with wire.AddressOnlyKey metadata it never adds a member.
func (c *clusterServer) MemberAdd(ctx context.Context, req *storev1.MemberAddRequest) (*storev1.MemberAddResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "store: member id is required")
	}
	if err := raftnode.CheckPeerAddress(req.GetPeerAddress()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	md, _ := metadata.FromIncomingContext(ctx)
	addressOnly := len(md.Get(wire.AddressOnlyKey)) > 0
	resp, err := leaderCall(ctx, c.s,
		func(ctx context.Context) (*storev1.MemberAddResponse, error) {
			var err error
			if addressOnly {
				err = c.s.cfg.Node.UpdateClientAddress(ctx, req.GetId(), req.GetClientAddress())
			} else {
				err = c.s.cfg.Node.AddMember(ctx, req.GetId(), req.GetPeerAddress(), req.GetClientAddress(), req.GetNonVoter())
			}
			if err != nil {
				return nil, err
			}
			ms, err := c.members(ctx)
			return &storev1.MemberAddResponse{Header: c.s.header(0), Members: ms}, err
		},
		func(ctx context.Context, cc *grpc.ClientConn) (*storev1.MemberAddResponse, error) {
			if addressOnly {
				ctx = metadata.AppendToOutgoingContext(ctx, wire.AddressOnlyKey, "1")
			}
			return storev1.NewClusterServiceClient(cc).MemberAdd(ctx, req)
		})
	return resp, toStatus(err)
}

// MemberRemove removes a member.
func (c *clusterServer) MemberRemove(ctx context.Context, req *storev1.MemberRemoveRequest) (*storev1.MemberRemoveResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "store: member id is required")
	}
	resp, err := leaderCall(ctx, c.s,
		func(ctx context.Context) (*storev1.MemberRemoveResponse, error) {
			if err := c.s.cfg.Node.RemoveMember(ctx, req.GetId()); err != nil {
				return nil, err
			}
			ms, err := c.members(ctx)
			return &storev1.MemberRemoveResponse{Header: c.s.header(0), Members: ms}, err
		},
		func(ctx context.Context, cc *grpc.ClientConn) (*storev1.MemberRemoveResponse, error) {
			return storev1.NewClusterServiceClient(cc).MemberRemove(ctx, req)
		})
	return resp, toStatus(err)
}

// MemberPromote turns a non-voter into a voter.
func (c *clusterServer) MemberPromote(ctx context.Context, req *storev1.MemberPromoteRequest) (*storev1.MemberPromoteResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "store: member id is required")
	}
	resp, err := leaderCall(ctx, c.s,
		func(ctx context.Context) (*storev1.MemberPromoteResponse, error) {
			if err := c.s.cfg.Node.PromoteMember(ctx, req.GetId()); err != nil {
				return nil, err
			}
			ms, err := c.members(ctx)
			return &storev1.MemberPromoteResponse{Header: c.s.header(0), Members: ms}, err
		},
		func(ctx context.Context, cc *grpc.ClientConn) (*storev1.MemberPromoteResponse, error) {
			return storev1.NewClusterServiceClient(cc).MemberPromote(ctx, req)
		})
	return resp, toStatus(err)
}

// TransferLeadership hands leadership to a voter.
func (c *clusterServer) TransferLeadership(ctx context.Context, req *storev1.TransferLeadershipRequest) (*storev1.TransferLeadershipResponse, error) {
	resp, err := leaderCall(ctx, c.s,
		func(ctx context.Context) (*storev1.TransferLeadershipResponse, error) {
			id, err := c.s.cfg.Node.TransferLeadership(ctx, req.GetId())
			if err != nil {
				return nil, err
			}
			return &storev1.TransferLeadershipResponse{Header: c.s.header(0), LeaderId: id}, nil
		},
		func(ctx context.Context, cc *grpc.ClientConn) (*storev1.TransferLeadershipResponse, error) {
			return storev1.NewClusterServiceClient(cc).TransferLeadership(ctx, req)
		})
	return resp, toStatus(err)
}

// ReadIndex confirms leadership and returns the commit index (on the
// leader; forwarded there from other members).
func (c *clusterServer) ReadIndex(ctx context.Context, _ *storev1.ReadIndexRequest) (*storev1.ReadIndexResponse, error) {
	resp, err := leaderCall(ctx, c.s,
		func(ctx context.Context) (*storev1.ReadIndexResponse, error) {
			idx, err := c.s.cfg.Node.ReadIndex(ctx)
			if err != nil {
				return nil, err
			}
			return &storev1.ReadIndexResponse{Header: c.s.header(0), Index: idx}, nil
		},
		func(ctx context.Context, cc *grpc.ClientConn) (*storev1.ReadIndexResponse, error) {
			return storev1.NewClusterServiceClient(cc).ReadIndex(ctx, &storev1.ReadIndexRequest{})
		})
	return resp, toStatus(err)
}
