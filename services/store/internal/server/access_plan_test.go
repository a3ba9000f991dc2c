package server

import (
	"crypto/x509"
	"testing"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pkiplan"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// TestPlannedCertificatesPassAccess issues the certificates lib/pkiplan
// plans for a deployment and checks each caller's against the store's
// access policy, for every method that caller's code calls: a
// certificate planned with a wrong organization, or a policy that drops
// a caller, fails here. The lists are what each caller does, not a copy
// of Access.
func TestPlannedCertificatesPassAccess(t *testing.T) {
	ca, err := pki.NewCA(pkiplan.InternalAuthority.CommonName())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pkiplan.Deployment(pkiplan.Loopback(), pkiplan.Loopback())
	if err != nil {
		t.Fatal(err)
	}
	leaf := map[pkiplan.Kind]*x509.Certificate{}
	for _, c := range plan {
		if c.Signer != pkiplan.InternalAuthority {
			continue
		}
		kp, err := ca.Issue(c.Spec)
		if err != nil {
			t.Fatal(err)
		}
		tc, err := kp.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		// The chain a handshake verifies: the store requires client
		// authentication against the internal CA.
		if _, err := tc.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			if c.Kind == pkiplan.Admission || c.Kind == pkiplan.FlowControl {
				continue // serving only: they call no store
			}
			t.Fatalf("%s is no client certificate: %v", c.Kind, err)
		}
		leaf[c.Kind] = tc.Leaf
	}

	const (
		txn       = storev1.KVService_Txn_FullMethodName
		rng       = storev1.KVService_Range_FullMethodName
		compact   = storev1.KVService_Compact_FullMethodName
		watch     = storev1.WatchService_Watch_FullMethodName
		grant     = storev1.LeaseService_LeaseGrant_FullMethodName
		keepAlive = storev1.LeaseService_LeaseKeepAlive_FullMethodName
		revoke    = storev1.LeaseService_LeaseRevoke_FullMethodName
		ttl       = storev1.LeaseService_LeaseTimeToLive_FullMethodName
		list      = storev1.ClusterService_MemberList_FullMethodName
		add       = storev1.ClusterService_MemberAdd_FullMethodName
		remove    = storev1.ClusterService_MemberRemove_FullMethodName
		promote   = storev1.ClusterService_MemberPromote_FullMethodName
		transfer  = storev1.ClusterService_TransferLeadership_FullMethodName
		readIndex = storev1.ClusterService_ReadIndex_FullMethodName
		status    = storev1.MaintenanceService_Status_FullMethodName
		snapshot  = storev1.MaintenanceService_Snapshot_FullMethodName
	)
	calls := map[pkiplan.Kind][]string{
		// The gateway reads, writes, watches and holds leases; its store
		// client finds the leader with MemberList.
		pkiplan.GatewayClient: {rng, txn, watch, grant, keepAlive, revoke, ttl, list},
		// The watch fan-out tier reads and watches.
		pkiplan.WatchFanout: {rng, watch, list},
		// Flow control reads and watches its configuration and writes
		// its replicas' leader-election Lease.
		pkiplan.FlowControl: {rng, txn, watch, list},
		// A member forwards writes, leases, compactions and membership
		// changes to the leader, asks it for a read index, and joins.
		pkiplan.Store: {txn, grant, keepAlive, revoke, compact, add, remove, promote, transfer, readIndex, list},
		// The store CLI.
		pkiplan.Operator: {list, add, remove, promote, transfer, compact, status, snapshot},
	}
	// And what each must not do: no caller but the gateway and flow
	// control writes keys from outside, no operator reads them.
	refused := map[pkiplan.Kind][]string{
		pkiplan.WatchFanout: {txn, grant, add, compact, snapshot},
		pkiplan.FlowControl: {grant, add, compact, snapshot},
		pkiplan.Operator:    {rng, txn, watch, grant},
	}
	policy := Access()
	for kind, methods := range calls {
		for _, m := range methods {
			if err := policy.Authorize(leaf[kind], m); err != nil {
				t.Errorf("%s calling %s: %v", kind, m, err)
			}
		}
	}
	for kind, methods := range refused {
		for _, m := range methods {
			if err := policy.Authorize(leaf[kind], m); err == nil {
				t.Errorf("%s may call %s", kind, m)
			}
		}
	}
}
