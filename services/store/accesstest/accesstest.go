// Package accesstest makes one call of each method of the store's gRPC
// API, for tests of which identities the store lets call what (the store's
// access policy refuses a call with PermissionDenied before it does
// anything).
package accesstest

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Call is one call of a store method.
type Call struct {
	// Method is the method's name, e.g. "Range".
	Method string
	// Do makes the call on conn and returns its error.
	Do func(ctx context.Context, conn *grpc.ClientConn) error
}

// Target is what the calls name.
type Target struct {
	// Key is the key Txn writes, Range reads and Watch watches.
	Key string
	// Member is the member TransferLeadership names.
	Member string
}

// NonVoter is the member MemberAdd adds, with a peer address nothing
// listens on, and MemberRemove removes.
const NonVoter = "nv"

// Calls returns one call of each method of the store, in an order in which
// each may succeed where it is allowed: MemberAdd adds the non-voter
// NonVoter and MemberRemove, later, removes it again (so the group keeps
// its quorum whoever is allowed); MemberPromote names a member that does
// not exist.
func Calls(t Target) []Call {
	return []Call{
		{"Range", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewKVServiceClient(c).Range(ctx, &storev1.RangeRequest{Key: []byte(t.Key)})
			return err
		}},
		{"Txn", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewKVServiceClient(c).Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{
				Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(t.Key), Value: []byte("v")}},
			}}})
			return err
		}},
		{"Watch", func(ctx context.Context, c *grpc.ClientConn) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w, err := storev1.NewWatchServiceClient(c).Watch(ctx)
			if err != nil {
				return err
			}
			// A Send to a stream the member has already ended (a refusal)
			// is io.EOF; Recv then returns the stream's status.
			if err := w.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: &storev1.WatchCreateRequest{Key: []byte(t.Key)}}}); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			_, err = w.Recv()
			return err
		}},
		{"LeaseGrant", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewLeaseServiceClient(c).LeaseGrant(ctx, &storev1.LeaseGrantRequest{Ttl: durationpb.New(time.Minute)})
			return err
		}},
		{"MemberList", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).MemberList(ctx, &storev1.MemberListRequest{})
			return err
		}},
		{"MemberAdd", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).MemberAdd(ctx, &storev1.MemberAddRequest{Id: NonVoter, PeerAddress: "127.0.0.1:1", NonVoter: true})
			return err
		}},
		{"MemberPromote", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).MemberPromote(ctx, &storev1.MemberPromoteRequest{Id: "absent"})
			return err
		}},
		{"MemberRemove", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).MemberRemove(ctx, &storev1.MemberRemoveRequest{Id: NonVoter})
			return err
		}},
		{"TransferLeadership", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).TransferLeadership(ctx, &storev1.TransferLeadershipRequest{Id: t.Member})
			return err
		}},
		{"ReadIndex", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).ReadIndex(ctx, &storev1.ReadIndexRequest{})
			return err
		}},
		{"Compact", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewKVServiceClient(c).Compact(ctx, &storev1.CompactRequest{Revision: 1})
			return err
		}},
		{"Status", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewMaintenanceServiceClient(c).Status(ctx, &storev1.StatusRequest{})
			return err
		}},
		{"Snapshot", func(ctx context.Context, c *grpc.ClientConn) error {
			s, err := storev1.NewMaintenanceServiceClient(c).Snapshot(ctx, &storev1.SnapshotRequest{})
			if err != nil {
				return err
			}
			for {
				if _, err := s.Recv(); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
			}
		}},
	}
}

// Only returns the calls of the named methods, in their order in calls.
func Only(calls []Call, methods ...string) []Call {
	var out []Call
	for _, c := range calls {
		if slices.Contains(methods, c.Method) {
			out = append(out, c)
		}
	}
	return out
}
