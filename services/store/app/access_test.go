package app

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

// storeCall is one call of every kind the store serves.
type storeCall struct {
	name string
	call func(ctx context.Context, c *grpc.ClientConn) error
}

// storeCalls makes one call of each store method; key is the key a Txn
// writes. MemberAdd adds the non-voter "nv" (with a peer address nothing
// listens on) and MemberRemove, later, removes it, so the group keeps its
// quorum whoever is allowed.
func storeCalls(key string) []storeCall {
	return []storeCall{
		{"Range", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewKVServiceClient(c).Range(ctx, &storev1.RangeRequest{Key: []byte("k")})
			return err
		}},
		{"Txn", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewKVServiceClient(c).Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{put(key, "v")}})
			return err
		}},
		{"Watch", func(ctx context.Context, c *grpc.ClientConn) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w, err := storev1.NewWatchServiceClient(c).Watch(ctx)
			if err != nil {
				return err
			}
			if err := w.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: &storev1.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
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
			_, err := storev1.NewClusterServiceClient(c).MemberAdd(ctx, &storev1.MemberAddRequest{Id: "nv", PeerAddress: "127.0.0.1:1", NonVoter: true})
			return err
		}},
		{"MemberPromote", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).MemberPromote(ctx, &storev1.MemberPromoteRequest{Id: "absent"})
			return err
		}},
		{"MemberRemove", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).MemberRemove(ctx, &storev1.MemberRemoveRequest{Id: "nv"})
			return err
		}},
		{"TransferLeadership", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := storev1.NewClusterServiceClient(c).TransferLeadership(ctx, &storev1.TransferLeadershipRequest{Id: "s0"})
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

// refused reports whether err is the access policy's refusal.
func refused(err error) bool {
	c := status.Code(err)
	return c == codes.PermissionDenied || c == codes.Unauthenticated
}

// TestAccessByIdentity calls every store method with each identity's
// certificate: the gateways get the data RPCs, the watch fan-out tier
// reads and watches, operators get membership, compaction, snapshots and
// status and no data, members what forwarding and joining use. A refused
// write changes nothing.
func TestAccessByIdentity(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	nd := startNodes(t, clusterConfigs(t, certs, 1)...)[0]
	allowed := map[string][]string{
		identity.GatewayOrganization:     {"Range", "Txn", "Watch", "LeaseGrant", "MemberList"},
		identity.WatchFanoutOrganization: {"Range", "Watch", "MemberList"},
		identity.OperatorOrganization:    {"MemberList", "MemberAdd", "MemberPromote", "MemberRemove", "TransferLeadership", "Compact", "Status", "Snapshot"},
		identity.StorePeerOrganization:   {"Txn", "LeaseGrant", "MemberList", "MemberAdd", "MemberPromote", "MemberRemove", "TransferLeadership", "ReadIndex", "Compact"},
		"system:masters":                 nil,
	}
	check, err := certs.Issue("checker", identity.GatewayOrganization)
	if err != nil {
		t.Fatal(err)
	}
	checker := dialAs(t, nd, check)
	for org, want := range allowed {
		t.Run(org, func(t *testing.T) {
			conf, err := certs.Issue("caller", org)
			if err != nil {
				t.Fatal(err)
			}
			conn := dialAs(t, nd, conf)
			key := "written-by-" + org
			for _, c := range storeCalls(key) {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				err := c.call(ctx, conn)
				cancel()
				switch ok := contains(want, c.name); {
				case ok && refused(err):
					t.Errorf("%s refused: %v", c.name, err)
				case !ok && status.Code(err) != codes.PermissionDenied:
					t.Errorf("%s: %v, want PermissionDenied", c.name, err)
				case !ok && !strings.Contains(status.Convert(err).Message(), "needs a client certificate with organization"):
					t.Errorf("%s: message %q does not say what is needed", c.name, status.Convert(err).Message())
				}
			}
			r, err := storev1.NewKVServiceClient(checker).Range(t.Context(), &storev1.RangeRequest{Key: []byte(key)})
			if err != nil {
				t.Fatal(err)
			}
			if wrote := len(r.GetKvs()) > 0; wrote != contains(want, "Txn") {
				t.Errorf("key written: %t, want %t", wrote, contains(want, "Txn"))
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func dialAs(t *testing.T, nd *node, conf *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(nd.cfg.ClientAddress, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestRaftTransportAcceptsOnlyMembers dials a member's raft port: a
// member's certificate completes the handshake, a gateway's or an
// operator's is refused.
func TestRaftTransportAcceptsOnlyMembers(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	nd := startNodes(t, clusterConfigs(t, certs, 1)...)[0]
	handshake := func(conf *tls.Config) error {
		conf = conf.Clone()
		conf.ServerName = "127.0.0.1"
		// With TLS 1.2 the client's handshake ends with the server's
		// Finished, sent only once the server accepted the client's
		// certificate (TLS 1.3 would tell the client later, on a read).
		conf.MaxVersion = tls.VersionTLS12
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", nd.cfg.PeerAddress, conf)
		if err != nil {
			return err
		}
		return c.Close()
	}
	if err := handshake(certs.Peer()); err != nil {
		t.Fatalf("member refused: %v", err)
	}
	for _, org := range []string{identity.GatewayOrganization, identity.OperatorOrganization} {
		conf, err := certs.Issue("intruder", org)
		if err != nil {
			t.Fatal(err)
		}
		if err := handshake(conf); err == nil {
			t.Errorf("raft transport accepted a certificate with O=%s", org)
		}
	}
	// A certificate from another CA never gets that far.
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := other.Issue(pki.CertSpec{CommonName: "store", Organizations: []string{identity.StorePeerOrganization}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(pki.ClientTLS(&cert, certs.Peer().RootCAs, "")); err == nil {
		t.Error("raft transport accepted a certificate from another CA")
	}
}
