package app

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/accesstest"
	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

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
			for _, c := range accesstest.Calls(accesstest.Target{Key: key, Member: "s0"}) {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				err := c.Do(ctx, conn)
				cancel()
				switch ok := slices.Contains(want, c.Method); {
				case ok && refused(err):
					t.Errorf("%s refused: %v", c.Method, err)
				case !ok && status.Code(err) != codes.PermissionDenied:
					t.Errorf("%s: %v, want PermissionDenied", c.Method, err)
				case !ok && !strings.Contains(status.Convert(err).Message(), "needs a client certificate with organization"):
					t.Errorf("%s: message %q does not say what is needed", c.Method, status.Convert(err).Message())
				}
			}
			r, err := storev1.NewKVServiceClient(checker).Range(t.Context(), &storev1.RangeRequest{Key: []byte(key)})
			if err != nil {
				t.Fatal(err)
			}
			if wrote := len(r.GetKvs()) > 0; wrote != slices.Contains(want, "Txn") {
				t.Errorf("key written: %t, want %t", wrote, slices.Contains(want, "Txn"))
			}
		})
	}
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
	other := pkitest.NewCA(t, "other")
	cert := pkitest.IssueTLS(t, other, pki.CertSpec{CommonName: "store", Organizations: []string{identity.StorePeerOrganization}, Client: true})
	if err := handshake(pki.ClientTLS(&cert, certs.Peer().RootCAs, "")); err == nil {
		t.Error("raft transport accepted a certificate from another CA")
	}
}

// TestFlowControlWritesOnlyLeases: the flow-control service's
// certificate may write the Leases its replicas elect a leader with, and
// nothing else; a refused write changes nothing.
func TestFlowControlWritesOnlyLeases(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	nd := startNodes(t, clusterConfigs(t, certs, 1)...)[0]
	conf, err := certs.Issue("flowcontrol", identity.FlowControlOrganization)
	if err != nil {
		t.Fatal(err)
	}
	kv := storev1.NewKVServiceClient(dialAs(t, nd, conf))
	put := func(key string) error {
		_, err := kv.Txn(t.Context(), &storev1.TxnRequest{Success: []*storev1.RequestOp{{
			Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: []byte("v")}},
		}}})
		return err
	}
	lease := "/registry/coordination.k8s.io/leases/kube-system/meridian-flowcontrol"
	if err := put(lease); err != nil {
		t.Fatalf("Lease write refused: %v", err)
	}
	for _, key := range []string{
		"/registry/secrets/default/token",
		"/registry/coordination.k8s.io/leasesX",
		"/registry/coordination.k8s.io/",
	} {
		if err := put(key); status.Code(err) != codes.PermissionDenied {
			t.Errorf("write of %s: %v, want PermissionDenied", key, err)
		}
	}
	// A delete of a range reaching past the Leases is refused too.
	_, err = kv.Txn(t.Context(), &storev1.TxnRequest{Success: []*storev1.RequestOp{{
		Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{
			Key: []byte("/registry/coordination.k8s.io/leases/"), RangeEnd: []byte{0},
		}},
	}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("delete past the Leases: %v, want PermissionDenied", err)
	}
	check, err := certs.Issue("checker", identity.GatewayOrganization)
	if err != nil {
		t.Fatal(err)
	}
	r, err := storev1.NewKVServiceClient(dialAs(t, nd, check)).Range(t.Context(), &storev1.RangeRequest{Key: []byte("/registry/"), RangeEnd: []byte("/registry0")})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetKvs()) != 1 || string(r.GetKvs()[0].GetKey()) != lease {
		t.Errorf("keys after the writes: %v, want only the Lease", r.GetKvs())
	}
}
